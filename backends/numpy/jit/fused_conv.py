"""Compiled FusedConv: Conv with bias, then a Relu or Clip, without a second pass in NumPy.

The portable kernel of FusedConv (``portable.ops.fused.composed_kernel``) runs the backend's
Conv, then the activation's own kernel in place on the result: Clip is two NumPy passes
(maximum, then minimum) and the xp Conv adds its bias in a third. Here, for a FusedConv with
no residual ``Z`` whose activation is none, Relu or Clip (with bounds that are not NaN):

- a depthwise Conv runs the compiled depthwise loop with the bounds applied inside it, on
  each plane or channel run while it is still in cache (``depthwise.plan_conv``);
- any other Conv with an activation runs the backend's Conv kernel without its bias, then
  one compiled pass that adds the bias and holds the result in the bounds
  (``bias_and_bounds``), which LLVM vectorises.

Each result is the composed kernel's, bit for bit: the same additions and comparisons in the
same order (``depthwise.bound`` is np.clip's maximum-then-minimum rule). Every other FusedConv
(a residual, another activation, an integer or half type, a NaN bound) is prepared by the
composed kernel, unchanged. Like the other compiled kernels, the chosen call is bound
directly (``bind``), and each loop is compiled, or loaded from numba's disk cache, while the
plan is built.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np

import portable

from backends.numpy.jit import depthwise
from backends.numpy.jit.support import JIT, floats
from backends.xp.kernels.fused import fused_conv as composed
from portable.backend import PreparedKernel, bound_kernel
from portable.ops.fused import activation_parts, split_attrs
from portable.ops.registry import get

# The activations whose effect is a pair of bounds: the op's name -> (low, high) before its
# operands (Clip's min and max, inputs 1 and 2) are applied.
BOUNDED_ACTIVATIONS = {"": (-math.inf, math.inf), "Relu": (0.0, math.inf),
                       "Clip": (-math.inf, math.inf)}


def activation_bounds(attrs: dict) -> tuple[float, float] | None:
    """(low, high) that a FusedConv's activation holds its result in, or None when the
    activation is not a pair of bounds or a bound is NaN (np.clip then gives NaN
    everywhere, which the loops' comparisons would not)."""
    activation = attrs.get("activation") or ""
    if activation not in BOUNDED_ACTIVATIONS:
        return None
    low, high = BOUNDED_ACTIVATIONS[activation]
    if activation == "Clip":
        _, operands = activation_parts(activation, attrs.get("activation_attrs") or "{}")
        given = dict(operands)
        low, high = float(given.get(1, low)), float(given.get(2, high))
    if math.isnan(low) or math.isnan(high):
        return None
    return low, high


@numba.njit(**JIT)
def bias_and_bounds(y, bias, low, high):
    """y (N, M, H, W) += bias[m] per channel, then held inside [low, high], in one pass."""
    n, m, rows, cols = y.shape
    for i in range(n):
        for o in range(m):
            b = bias[o]
            for r in range(rows):
                row = y[i, o, r]
                for q in range(cols):
                    row[q] = depthwise.bound(row[q] + b, low, high)


def _plan(backend, input_types, output_types, attrs):
    """``(kind, state)``: ``("depthwise", depthwise plan)``, ``("epilogue", (bound Conv,
    zeros, low, high))`` or ``("composed", bound composed kernel)``."""
    own, activation, _ = split_attrs(get("Conv"), attrs)
    residual = len(input_types) > 3 and input_types[3] is not None
    limits = None if residual else activation_bounds(attrs)
    conv_types = list(input_types[:3])
    bias = conv_types[2] if len(conv_types) > 2 else None
    dtype = output_types[0].dtype
    if (limits is not None and floats(conv_types[0], conv_types[1], output_types[0])
            and (bias is None or bias.dtype == dtype)):
        state = depthwise.plan_conv(conv_types, output_types, own, limits)
        if state is not None:
            return "depthwise", state
        if activation:
            conv = bound_kernel(backend.kernel("Conv"), backend, conv_types[:2], output_types,
                                own)
            low, high = (dtype.type(v) for v in limits)
            return "epilogue", (conv, np.zeros(output_types[0].shape[1], dtype), low, high)
    return "composed", bound_kernel(composed, backend, input_types, output_types, attrs)


def _depthwise(state, ctx, inputs, outputs, attrs) -> None:
    bias = inputs[2] if len(inputs) > 2 else None
    if not depthwise.run_conv(state, inputs[0], inputs[1], bias, outputs[0]):
        composed(ctx, inputs, outputs, attrs)  # (a strided view: NumPy takes any layout)


def _epilogue(state, ctx, inputs, outputs, attrs) -> None:
    conv, zeros, low, high = state
    conv(ctx, inputs[:2], outputs, attrs)  # (its bound plan ignores the activation's keys)
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else zeros
    bias_and_bounds(outputs[0], bias, low, high)


_CALLS = {"depthwise": _depthwise, "epilogue": _epilogue}


def _run(planned, ctx, inputs, outputs, attrs):
    kind, state = planned
    if kind == "composed":
        return state(ctx, inputs, outputs, attrs)
    return _CALLS[kind](state, ctx, inputs, outputs, attrs)


_warmed: set = set()


def _warm(kind: str, state, input_types, output_types) -> None:
    """Compile the chosen loop (or load it from numba's disk cache) while planning, not at
    the first run: its first call on arrays of the step's dtype, once per loop and dtype per
    process (the Conv of the epilogue path is not run)."""
    dtype = output_types[0].dtype
    if kind == "depthwise":
        loop, zeros, g, low, high = state
        if (loop, dtype) not in _warmed:
            loop(*(np.zeros(t.shape, t.dtype) for t in input_types[:2]), zeros,
                 np.zeros(output_types[0].shape, dtype), g, low, high)
            _warmed.add((loop, dtype))
    elif (bias_and_bounds, dtype) not in _warmed:
        _, zeros, low, high = state
        bias_and_bounds(np.zeros((1, 1, 1, 1), dtype), zeros[:1], low, high)
        _warmed.add((bias_and_bounds, dtype))


class _FusedConv(PreparedKernel):
    """The FusedConv table entry of the compiled tier; ``bind`` hands back the chosen call
    itself (the composed kernel's own bound call where no loop applies)."""

    def __init__(self) -> None:
        super().__init__(_run, _plan)
        self.__name__ = self.__qualname__ = "fused_conv"
        self.fallback = composed
        self.workspace = composed.workspace  # (the Conv kernel inside takes the same scratch)

    def bind(self, backend, input_types, output_types, attrs):
        kind, state = _plan(backend, input_types, output_types, attrs)
        if kind == "composed":
            return state
        _warm(kind, state, input_types, output_types)
        return functools.partial(_CALLS[kind], state)

    # What the tests call the compiled kernel without its fallback.
    @staticmethod
    def compiled_prepare(input_types, output_types, attrs, backend=None):
        planned = _plan(backend or portable.cpu().backend, input_types, output_types, attrs)
        return None if planned[0] == "composed" else planned

    @staticmethod
    def compiled_run(planned, ctx, inputs, outputs, attrs) -> bool:
        _run(planned, ctx, inputs, outputs, attrs)
        return True


fused_conv = _FusedConv()

kernels = {"portable.FusedConv": fused_conv}
