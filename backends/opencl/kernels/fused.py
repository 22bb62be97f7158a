"""OpenCL kernels of the fused private ops (``portable/ops/fused.py``).

``portable.FusedElementwise`` compiles its whole chain into one generated kernel: each step
of the body becomes steps of a ``codegen.Fused`` expression (variadic ops fold, Clip becomes
Max/Min against its bounds), so the chain reads its inputs once and writes the output once,
with every intermediate in registers. ``portable.FusedConv`` with no activation, a Relu or a
Clip adds its bias and residual and clamps in the GEMM's store (``gemm.Epilogue``): one pass
over the output instead of three. Other activations, thin (depthwise) Convs with an
activation or a residual and ``portable.FusedGemm`` run the Conv or Gemm kernel, then the Add
and the activation's kernels in place on the result. Both are prepared once per plan step.
"""
from __future__ import annotations

import functools
import math

from portable.ir.graph import Node
from portable.ops import registry
from portable.ops.conv import window_geometry
from portable.ops.fused import activation_bounds, composed_kernel, parse_body

from backends.opencl.codegen import Fused
from backends.opencl.elementwise import run_elementwise
from backends.opencl.gemm import Epilogue
from backends.opencl.kernels.conv import conv_forward, conv_workspace, thin
from backends.opencl.kernels.window import Window
from backends.opencl.kernels.table import kernel_table
from backends.opencl.optable import TABLE

kernels, kernel = kernel_table()

# op -> attribute names passed as the table op's parameters, in order
_FOLDS = {"Max": "Max", "Min": "Min", "Sum": "Add", "Mean": "Add"}


def _translate(fused: Fused, op_name: str, args: list, attrs: dict, const) -> tuple:
    """Add the steps of one body op to ``fused``; returns its result reference."""
    if op_name in _FOLDS:
        value = args[0]
        for other in args[1:]:
            value = fused.add(TABLE[_FOLDS[op_name]], value, other)
        if op_name == "Mean":
            value = fused.add(TABLE["Div"], value, const(len(args)))
        return value if len(args) > 1 or op_name == "Mean" else \
            fused.add(TABLE["Identity"], value)
    if op_name == "Clip":
        value = args[0]
        for bound, extreme in zip(args[1:3], ("Max", "Min")):
            if bound is not None:
                value = fused.add(TABLE[extreme], value, bound)
        return value if value != args[0] else fused.add(TABLE["Identity"], value)
    if op_name == "Gelu":
        name = "GeluTanh" if attrs["approximate"] == "tanh" else "Gelu"
        return fused.add(TABLE[name], *args)
    if op_name == "Cast":  # every step keeps the chain's type: a copy
        return fused.add(TABLE["Identity"], *args)
    # an ONNX op's table entry names its float parameters after the op's attributes
    entry = TABLE[op_name]
    return fused.add(entry, *args, params=[attrs[n] for n in entry.params])


@functools.lru_cache(maxsize=1024)
def _body(body: str):
    """The chain as (op name, input refs, resolved attrs) steps."""
    program = []
    for index, (op_name, refs, items) in enumerate(parse_body(body)):
        op = registry.get(op_name)
        node = Node(op_name, tuple(f"in{i}" for i in range(len(refs))), ("out",), dict(items),
                    f"fused/{op_name}{index}")
        program.append((op_name, refs, op.resolve_attrs(node)))
    return tuple(program)


@kernel("portable.FusedElementwise", half="native")
def fused_elementwise(ctx, inputs, outputs, attrs):
    out = outputs[0]
    operands = list(inputs)
    # Clip bounds arrive as one-element tensors: 0-d, so they never broadcast a 0-d chain up.
    fused = Fused(len(operands))
    previous = None
    for op_name, refs, step_attrs in _body(attrs["body"]):
        args = []
        for position, ref in enumerate(refs):
            if ref < 0:
                args.append(previous)
                continue
            if op_name == "Clip" and position > 0:
                operands.append(operands[ref].reshape(()))
                args.append(fused.input(len(operands) - 1))
            else:
                args.append(fused.input(ref))
        if op_name == "Clip":
            args = (args + [None, None])[:3]

        def const(value):
            operands.append(value)
            return fused.input(len(operands) - 1)
        previous = _translate(fused, op_name, args, step_attrs, const)
    run_elementwise(fused.steps, operands, [out], [out.dtype])


_composed_conv = composed_kernel("Conv")


def _prepare_fused_conv(backend, input_types, output_types, attrs):
    """(window, clamp bounds, None) when ``conv_forward`` runs the whole step (the GEMM's
    store finishing it), or (None, _, the composed kernel bound to these types) when a Conv
    kernel and then the Add and activation kernels run it."""
    x, w = input_types[:2]
    win = Window.of(window_geometry(x.shape[2:], w.shape[2:], attrs), x.shape[2:])
    bounds = activation_bounds(attrs)
    residual = len(input_types) > 3 and input_types[3] is not None
    plain = not attrs.get("activation") and not residual  # (any Conv kernel runs it)
    if not plain and (bounds is None or thin(x.shape, attrs["group"], win)):
        return None, (None, None), _composed_conv.bind(backend, input_types, output_types,
                                                       attrs)
    low, high = (None, None) if bounds is None else \
        (None if math.isinf(b) else b for b in bounds)  # (no compare for no bound)
    return win, (low, high), None


@kernel("portable.FusedConv", prepare=_prepare_fused_conv)
def fused_conv(state, ctx, inputs, outputs, attrs):
    win, (low, high), composed = state
    if composed is not None:
        return composed(ctx, inputs, outputs, attrs)
    bias = inputs[2] if len(inputs) > 2 else None
    residual = inputs[3] if len(inputs) > 3 else None
    conv_forward(inputs[0], inputs[1], bias, win, attrs["group"], outputs[0], ctx,
                 Epilogue(residual=residual, low=low, high=high))


fused_conv.workspace = conv_workspace
kernel("portable.FusedGemm", half="native")(composed_kernel("Gemm"))
