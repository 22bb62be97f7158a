"""Recurrent ops: RNN, LSTM and GRU with ONNX (opset 22) semantics, and their private backward
ops.

The gradient of a recurrent op is one private op per cell type (``portable.RNNGrad``,
``portable.LSTMGrad``, ``portable.GRUGrad``) that takes the forward inputs plus the output
gradients and returns the gradients of every float input by backpropagation through time. It
recomputes the forward pass to get the gate values: the ONNX op has no outputs to keep them in.

Attributes follow ONNX: ``activations`` unset means the defaults (RNN: Tanh; LSTM: Sigmoid,
Tanh, Tanh; GRU: Sigmoid, Tanh) for every direction; ``activation_alpha``/``activation_beta``
are consumed in order by the activations that take a parameter (as onnxruntime reads them);
``clip`` bounds the input of every gate activation (not LSTM's h(C), as in onnxruntime).
``sequence_lens`` is supported forward and backward: a batch item stops after its length
(outputs past it are zero, its final state is the one after its last step; an item of length 0
has zero final states, as in onnxruntime).
"""
from __future__ import annotations

from dataclasses import dataclass

from portable.ir.graph import TensorType
from portable.ops.registry import Attr, declare
from portable.ops.rules import same_dtype

DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
SEQUENCE_LENS = 4  # input index of sequence_lens: integer, never differentiated

# Activations an RNN gate may use (lower-cased ONNX names) -> default (alpha, beta), the
# defaults of the corresponding ONNX operators; None marks a parameter the function lacks.
ACTIVATIONS = {
    "relu": (None, None), "tanh": (None, None), "sigmoid": (None, None),
    "affine": (1.0, 0.0), "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None),
    "softsign": (None, None), "softplus": (None, None),
}


@dataclass(frozen=True)
class Cell:
    """What differs between recurrent cell types, as data the type rules and kernels share."""

    name: str
    gates: int                              # gate blocks stacked in W and R
    activations: tuple[str, ...]            # default activations of one direction
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    flag: str | None                        # the cell's own 0/1 attribute (RNN has none)
    peepholes: int = 0                      # input index of P (LSTM), 0 when absent
    clipped: int = 2                        # leading activations whose input ``clip`` bounds

    @property
    def states(self) -> int:
        """Number of recurrent states (h, and c for LSTM): outputs after Y."""
        return len(self.outputs) - 1

    @property
    def grad_inputs(self) -> tuple[str, ...]:
        return self.inputs + tuple(f"d{o.rstrip('?')}?" for o in self.outputs)

    @property
    def grad_outputs(self) -> tuple[str, ...]:
        # one gradient per forward input except sequence_lens
        return tuple(f"d{i.rstrip('?')}" for k, i in enumerate(self.inputs)
                     if k != SEQUENCE_LENS)


_COMMON_INPUTS = ("X", "W", "R", "B?", "sequence_lens?", "initial_h?")
LSTM_CELL = Cell("LSTM", 4, ("Sigmoid", "Tanh", "Tanh"), _COMMON_INPUTS + ("initial_c?", "P?"),
                 ("Y?", "Y_h?", "Y_c?"), "input_forget", peepholes=7)
GRU_CELL = Cell("GRU", 3, ("Sigmoid", "Tanh"), _COMMON_INPUTS, ("Y?", "Y_h?"),
                "linear_before_reset")
RNN_CELL = Cell("RNN", 1, ("Tanh",), _COMMON_INPUTS, ("Y?", "Y_h?"), None, clipped=1)


def resolve_activations(cell: Cell, attrs: dict) -> list[list[tuple[str, float, float]]]:
    """Per direction, the ``(name, alpha, beta)`` of each gate activation of ``cell``.

    Values left over in ``activation_alpha``/``activation_beta`` are ignored, as onnxruntime
    does. Raises ValueError naming the problem (unknown name, wrong count).
    """
    directions = DIRECTIONS[attrs["direction"]]
    names = attrs.get("activations")
    per_dir = len(cell.activations)
    names = list(names) if names else list(cell.activations) * directions
    if len(names) != per_dir * directions:
        raise ValueError(f"activations {names} must list {per_dir} functions per direction "
                         f"({per_dir * directions} for direction={attrs['direction']!r})")
    alphas = list(attrs.get("activation_alpha") or ())
    betas = list(attrs.get("activation_beta") or ())
    resolved = []
    for name in names:
        key = str(name).lower()
        if key not in ACTIVATIONS:
            raise ValueError(f"unknown activation {name!r}; known: {sorted(ACTIVATIONS)}")
        alpha, beta = ACTIVATIONS[key]
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        resolved.append((key, float(alpha or 0.0), float(beta or 0.0)))
    return [resolved[d * per_dir:(d + 1) * per_dir] for d in range(directions)]


# -- type rules ---------------------------------------------------------------------------------


def _expect(ctx, index: int, shape: tuple[int, ...]) -> None:
    if ctx.has(index) and ctx.shape(index) != tuple(shape):
        ctx.fail(f"input {ctx.op.input_name(index)!r} must have shape {tuple(shape)}, "
                 f"got {ctx.shape(index)}")


def _rnn_types(ctx, cell: Cell) -> tuple[TensorType, TensorType]:
    """Check a recurrent node's inputs; returns the types of Y and of one state (Y_h)."""
    attrs = ctx.attrs
    if attrs["direction"] not in DIRECTIONS:
        ctx.fail(f"direction {attrs['direction']!r} is not one of {sorted(DIRECTIONS)}")
    if attrs["layout"] not in (0, 1):
        ctx.fail(f"layout must be 0 or 1, got {attrs['layout']}")
    try:
        resolve_activations(cell, attrs)
    except ValueError as exc:
        ctx.fail(str(exc))
    x, w, r = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if len(x) != 3 or len(w) != 3 or len(r) != 3:
        ctx.fail("X, W and R must have rank 3")
    steps, batch = (x[0], x[1]) if attrs["layout"] == 0 else (x[1], x[0])
    dirs, hidden, gates = DIRECTIONS[attrs["direction"]], r[-1], cell.gates
    if attrs["hidden_size"] is not None and attrs["hidden_size"] != hidden:
        ctx.fail(f"hidden_size={attrs['hidden_size']} but R has {hidden} columns")
    _expect(ctx, 1, (dirs, gates * hidden, x[2]))
    _expect(ctx, 2, (dirs, gates * hidden, hidden))
    _expect(ctx, 3, (dirs, 2 * gates * hidden))
    _expect(ctx, SEQUENCE_LENS, (batch,))
    if ctx.has(SEQUENCE_LENS) and ctx.dtype(SEQUENCE_LENS).kind not in "iu":
        ctx.fail(f"sequence_lens must be int32, got {ctx.dtype(SEQUENCE_LENS).name}")
    state = (dirs, batch, hidden) if attrs["layout"] == 0 else (batch, dirs, hidden)
    for index in range(5, 5 + cell.states):
        _expect(ctx, index, state)
    if cell.peepholes:
        _expect(ctx, cell.peepholes, (dirs, 3 * hidden))
    floats = [i for i in range(len(cell.inputs)) if i != SEQUENCE_LENS and ctx.has(i)]
    dtype = same_dtype(ctx, floats)
    if dtype.kind != "f":
        ctx.fail(f"{cell.name} computes in floating point, got {dtype.name}")
    y = (steps, dirs, batch, hidden) if attrs["layout"] == 0 else (batch, steps, dirs, hidden)
    return TensorType(y, dtype), TensorType(state, dtype)


def _forward_infer(cell: Cell):
    def infer(ctx):
        y, state = _rnn_types(ctx, cell)
        return [y] + [state] * cell.states
    return infer


def _backward_infer(cell: Cell):
    def infer(ctx):
        y, state = _rnn_types(ctx, cell)
        heads = len(cell.inputs)
        for index, expected in enumerate([y] + [state] * cell.states, start=heads):
            if ctx.has(index) and ctx.type(index) != expected:
                ctx.fail(f"output gradient {ctx.op.input_name(index)!r} must be {expected!r}")
        dirs, hidden, dtype = ctx.shape(1)[0], ctx.shape(2)[2], state.dtype
        types = [ctx.type(0), ctx.type(1), ctx.type(2),
                 TensorType((dirs, 2 * cell.gates * hidden), dtype)] + [state] * cell.states
        if cell.peepholes:
            types.append(TensorType((dirs, 3 * hidden), dtype))
        return types
    return infer


# -- gradient rule ------------------------------------------------------------------------------


def _grad_rule(cell: Cell):
    def rule(g, dys):
        inputs = list(g.inputs) + [None] * (len(cell.inputs) - len(g.inputs))
        heads = list(dys) + [None] * (len(cell.outputs) - len(dys))
        # unset optional attributes stay unset on the backward node
        attrs = {k: v for k, v in g.attrs.items() if v is not None}
        grads = g.emit(f"portable.{cell.name}Grad", *inputs, *heads,
                       num_outputs=len(cell.grad_outputs), **attrs)
        result = []
        for index, handle in enumerate(inputs):
            if handle is None or index == SEQUENCE_LENS:
                result.append(None)
            else:
                result.append(grads[index if index < SEQUENCE_LENS else index - 1])
        return result
    return rule


def _attrs(cell: Cell) -> dict[str, Attr]:
    """The ONNX attribute schema; None defaults mean unset (activations: the defaults)."""
    attrs = {
        "activation_alpha": Attr("floats", None), "activation_beta": Attr("floats", None),
        "activations": Attr("strings", None), "clip": Attr("float", None),
        "direction": Attr("string", "forward"), "hidden_size": Attr("int", None),
        "layout": Attr("int", 0),
    }
    if cell.flag:
        attrs[cell.flag] = Attr("int", 0)
    return attrs


for _cell in (RNN_CELL, LSTM_CELL, GRU_CELL):
    declare(_cell.name, inputs=_cell.inputs, outputs=_cell.outputs,
            infer=_forward_infer(_cell), attrs=_attrs(_cell), onnx_since=22,
            grad=_grad_rule(_cell), nondiff_inputs=(SEQUENCE_LENS,),
            doc=f"ONNX {_cell.name}; gradient through portable.{_cell.name}Grad (BPTT).")
    declare(f"{_cell.name}Grad", domain="portable", inputs=_cell.grad_inputs,
            outputs=_cell.grad_outputs, infer=_backward_infer(_cell), attrs=_attrs(_cell),
            nondiff_inputs=(SEQUENCE_LENS,),
            doc=f"Gradients of every float input of {_cell.name} given its output gradients.")
