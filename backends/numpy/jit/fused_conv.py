"""Compiled FusedConv: Conv with bias, an optional residual ``Z``, then a Relu or Clip,
without further passes in NumPy.

The portable kernel of FusedConv (``portable.ops.fused.composed_kernel``) runs the backend's
Conv, then the Add of ``Z`` and the activation's own kernel in place on the result: Clip is
two NumPy passes (maximum, then minimum) and the xp Conv adds its bias in a third. Here, for
a float FusedConv whose activation is none, Relu or Clip (with bounds that are not NaN):

- a depthwise Conv without ``Z`` runs the compiled depthwise loop with the bounds applied
  inside it, on each plane or channel run while it is still in cache
  (``depthwise.plan_conv``);
- a dense 2-D Conv (group 1) that the small loop does not take, or that the stacked loop
  takes (faster there: the table above ``dense_conv.DensePlan``), runs the compiled dense
  Conv (``dense_conv.DensePlan``: a compiled im2col, then sgemm or register-tiled dot
  products, or the stacked loop, chosen by shape), then one compiled pass that adds the bias
  and ``Z`` and holds the result in the bounds (``bias_residual_and_bounds``, or
  ``bias_and_bounds`` without ``Z``), which LLVM vectorises (on the flat products,
  ``flat_conv.compact_bounded`` applies it while each band is copied into Y, in the same
  order, instead of a pass of its own). ResNet-18's small-image
  residual blocks (batch 1) went from 76-95 us to 54-76 us a Conv this way (the composed
  path spent 17-39 us in NumPy's im2col copy, and four passes after the GEMM);
- a Conv that the small loop takes otherwise (``small_conv.prepare_small``: a few channels
  on a small padded image, LeNet's first Conv) runs it with the bias, ``Z`` and the bounds
  applied as each output row is written (``small_conv.conv_small_bounded``): one compiled
  call where the Conv without bias, then ``bias_and_bounds``, took two and their wrappers
  (LeNet's 1->6 5x5 Conv on 28x28 at batch 1: 7.9 -> 5.4 us, with the loop's passes of four
  kernel offsets);
- a 1x1 Conv at stride 1 without padding runs sgemm on X itself, or the flat products
  (``flat_conv.pointwise_offsets``: float32, at most 512 input channels), and that pass,
  with its views kept between calls (``_pointwise``), or on planes of a few positions one
  compiled call on W transposed (``pointwise.py``);
- any other Conv with an activation or ``Z`` runs the backend's Conv kernel without its
  bias, then that same pass.

The epilogue makes the composed kernel's additions and comparisons in the same order (bias,
then ``Z``, then ``depthwise.bound``, np.clip's maximum-then-minimum rule); the Conv itself
may sum in another order (its own kernel or the dense plan's products). Every other
FusedConv (another activation, an integer or half type, a NaN bound) is prepared by the
composed kernel, unchanged. Like the other compiled kernels, the chosen call is bound
directly (``bind``), and each loop is compiled, or loaded from numba's disk cache, while the
plan is built.
"""
from __future__ import annotations

import functools

import numba
import numpy as np

import portable

from backends.numpy.jit import dense_conv, depthwise, flat_conv, pointwise, small_conv
from backends.numpy.jit.support import JIT, contiguous, floats, read_only
from backends.numpy.threads import several_threads, step_threads
from backends.xp.kernels.fused import fused_conv as composed
from portable.backend import PreparedKernel, bound_kernel
from portable.ops.fused import activation_bounds, split_attrs
from portable.ops.registry import get


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


@numba.njit(**JIT)
def bias_residual_and_bounds(y, bias, z, low, high):
    """y (N, M, P) = bound((y + bias[m]) + z) in one pass: the composed kernel's bias add,
    its Add of the residual and its activation, in that order."""
    n, m, positions = y.shape
    for i in range(n):
        for o in range(m):
            b = bias[o]
            row, extra = y[i, o], z[i, o]
            for t in range(positions):
                k = np.uint64(t)
                row[k] = depthwise.bound((row[k] + b) + extra[k], low, high)


def _plan(backend, input_types, output_types, attrs):
    """``(kind, state)``: ``("depthwise", depthwise plan)``, ``("pointwise", (zeros, low,
    high, residual, bound composed kernel, kept views, pointwise.TransposedWeights or
    None))``, ``("dense", (DensePlan, zeros, low, high, residual, bound composed kernel,
    kept views, whether several BLAS threads take it))``, ``("small", (geometry, zeros,
    low, high, residual, biased))``,
    ``("epilogue", (bound Conv, zeros, low, high, residual))`` or
    ``("composed", bound composed kernel)``. The composed kernel is bound only for the
    kinds that run it, and nothing is bound without a ``backend`` (``held_bytes``)."""
    own, activation, _ = split_attrs(get("Conv"), attrs)
    residual = len(input_types) > 3 and input_types[3] is not None
    limits = activation_bounds(attrs)
    conv_types = list(input_types[:3])
    bias = conv_types[2] if len(conv_types) > 2 else None
    dtype = output_types[0].dtype

    def fallback():  # (no backend: only the choice is wanted, nothing is bound)
        if backend is None:
            return None
        return bound_kernel(composed, backend, input_types, output_types, attrs)

    if (limits is None or not floats(conv_types[0], conv_types[1], output_types[0],
                                     input_types[3] if residual else None)
            or (bias is not None and bias.dtype != dtype)
            or (residual and tuple(input_types[3].shape) != tuple(output_types[0].shape))):
        return "composed", fallback()
    if not residual:
        state = depthwise.plan_conv(conv_types, output_types, own, limits)
        if state is not None:
            return "depthwise", state
    zeros = np.zeros(output_types[0].shape[1], dtype)  # (read only: the absent bias)
    low, high = (dtype.type(v) for v in limits)
    if dense_conv.DensePlan.applies(conv_types, output_types, own):
        plan = dense_conv.DensePlan(conv_types, output_types, own)
        if plan.layout == "pointwise":
            c, m = conv_types[0].shape[1], conv_types[1].shape[0]
            transposed = (pointwise.TransposedWeights(m, c, dtype)
                          if pointwise.applies(c, m, plan.product[2]) else None)
            offsets = (flat_conv.pointwise_offsets(c, m, plan.product[2], dtype)
                       if transposed is None else None)
            return "pointwise", (zeros, low, high, residual, fallback(), [None] * 10,
                                 transposed, offsets)
        # (its loops run one thread: a step that earns every allowed BLAS thread runs the
        # composed kernel's sgemm on them while the run allows several)
        threaded = plan.layout in ("stacked", "rows", "flat") and step_threads(
            "portable.FusedConv", input_types, output_types, attrs)
        return "dense", (plan, zeros, low, high, residual, fallback(), [None, None, None, None],
                         threaded)
    small = small_conv.prepare_small(conv_types, output_types, own)
    if small is not None and (activation or residual):  # (else: a plain Conv, composed)
        zeros = np.zeros_like(zeros)
        zeros.setflags(write=False)  # (as a plan's bias is: the loop is compiled for that)
        return "small", (small[1], zeros, low, high, residual, bias is not None)
    if activation or residual:
        conv = None if backend is None else bound_kernel(
            backend.kernel("Conv"), backend, conv_types[:2], output_types, own)
        return "epilogue", (conv, zeros, low, high, residual)
    return "composed", fallback()


def _depthwise(state, ctx, inputs, outputs, attrs) -> None:
    bias = inputs[2] if len(inputs) > 2 else None
    if not depthwise.run_conv(state, inputs[0], inputs[1], bias, outputs[0]):
        composed(ctx, inputs, outputs, attrs)  # (a strided view: NumPy takes any layout)


def _small(state, ctx, inputs, outputs, attrs) -> None:
    """The small loop with the epilogue inside it: any layout (it indexes the 4-D arrays)."""
    g, zeros, low, high, residual, biased = state
    small_conv.conv_small_bounded(inputs[0], inputs[1], inputs[2] if biased else zeros,
                                  inputs[3] if residual else None, outputs[0], g, low, high)


def _bind_small(state):
    """A step's direct call of the small loop (``_small`` without its unpacking): the bias
    and ``Z`` are present or not for the plan's life."""
    g, zeros, low, high, residual, biased = state
    conv = small_conv.conv_small_bounded
    if residual:
        def small_conv_residual(ctx, inputs, outputs, attrs):
            conv(inputs[0], inputs[1], inputs[2] if biased else zeros, inputs[3], outputs[0],
                 g, low, high)
        return small_conv_residual
    if biased:
        def small_conv_bias(ctx, inputs, outputs, attrs):
            conv(inputs[0], inputs[1], inputs[2], None, outputs[0], g, low, high)
        return small_conv_bias

    def small_conv_alone(ctx, inputs, outputs, attrs):
        conv(inputs[0], inputs[1], zeros, None, outputs[0], g, low, high)
    return small_conv_alone


def _add_epilogue(y, inputs, zeros, low, high, residual) -> None:
    """Bias, residual and bounds in one compiled pass over the Conv's result ``y``."""
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else zeros
    if residual:
        flat = y.shape[:2] + (-1,)
        bias_residual_and_bounds(y.reshape(flat), bias, inputs[3].reshape(flat), low, high)
    else:
        bias_and_bounds(y, bias, low, high)


def _epilogue(state, ctx, inputs, outputs, attrs) -> None:
    conv, zeros, low, high, residual = state
    if residual and not contiguous(outputs[0], inputs[3]):
        composed(ctx, inputs, outputs, attrs)
        return
    conv(ctx, inputs[:2], outputs, attrs)  # (its bound plan ignores the activation's keys)
    _add_epilogue(outputs[0], inputs, zeros, low, high, residual)


def _dense(state, ctx, inputs, outputs, attrs) -> None:
    """The compiled dense Conv (``dense_conv.DensePlan``), then the epilogue. The epilogue's
    flat views of Y and Z are kept while a plan hands the same arrays again (as the plan's
    own views are), which saves about a microsecond a call."""
    plan, zeros, low, high, residual, fallback, views, threaded = state
    if threaded and several_threads():
        fallback(ctx, inputs, outputs, attrs)
        return
    x, w, y = inputs[0], inputs[1], outputs[0]
    z = inputs[3] if residual else None
    if views[0] is not y or views[1] is not z:
        if not contiguous(y, z):
            fallback(ctx, inputs, outputs, attrs)
            return
        flat = y.shape[:2] + (-1,)
        views[:] = [y, z, y.reshape(flat), None if z is None else z.reshape(flat)]
    if not contiguous(x, w):
        fallback(ctx, inputs, outputs, attrs)
        return
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else zeros
    if plan.flat is not None:  # (the epilogue applied as each band is copied into Y)
        plan.flat.conv(ctx, x, w, y, (bias, z, low, high))
        return
    plan.conv(ctx, x, w, y)
    if residual:
        bias_residual_and_bounds(views[2], bias, views[3], low, high)
    else:
        bias_and_bounds(y, bias, low, high)


def _pointwise(state, ctx, inputs, outputs, attrs) -> None:
    """A 1x1 Conv at stride 1 without padding: one sgemm on X itself, then the epilogue.
    These are most of MobileNet's steps, on planes of 2x2 to 32x32, where the arithmetic
    takes about a microsecond: the Python around it is the rest. So the flat views of X, W,
    Y and Z are made once and kept while a plan hands the same arrays again (a plan's
    arrays are fixed), and a call is then one sgemm and one compiled pass (2.8-5.2 us a
    step on MobileNetV2-small's before, through ``_dense``), or, on planes of a few
    positions and a read-only weight, one compiled call on W transposed
    (``pointwise.pointwise_transposed``)."""
    zeros, low, high, residual, fallback, kept, transposed, offsets = state
    x, w, y = inputs[0], inputs[1], outputs[0]
    z = inputs[3] if residual else None
    if kept[0] is not x or kept[1] is not w or kept[2] is not y or kept[3] is not z:
        if not contiguous(x, w, y, z):
            fallback(ctx, inputs, outputs, attrs)
            return
        n, c, m = x.shape[0], x.shape[1], w.shape[0]
        kept[:] = [x, w, y, z, w.reshape(m, c), x.reshape(n, c, -1), y.reshape(n, m, -1),
                   y.reshape(n, m, 1, -1), None if z is None else z.reshape(n, m, -1),
                   None if offsets is None else flat_conv.pointwise_views(x, w, y)]
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else zeros
    wt = None if transposed is None else transposed.get(w, kept[4])
    if wt is not None:
        pointwise.pointwise_transposed(kept[5], wt, bias, kept[8] if residual else kept[6],
                                       residual, kept[6], low, high, transposed.acc)
        return
    if offsets is not None:
        flat_conv.pointwise_products(kept[9], offsets)
    else:
        np.matmul(kept[4], kept[5], out=kept[6])
    if residual:
        bias_residual_and_bounds(kept[6], bias, kept[8], low, high)
    else:
        bias_and_bounds(kept[7], bias, low, high)  # (rows of P: one vectorised run each)


def workspace_bytes(input_types, output_types, attrs) -> dict[str, int]:
    """The scratch the call takes (the planner's ``workspace`` rule): the composed Conv's
    (the compiled loops take the same buffers), and the dense plan's own where it has one."""
    need = dict(composed.workspace(input_types, output_types, attrs))
    kind, state = _plan(None, input_types, output_types, attrs)
    if kind == "dense":
        need.update(state[0].workspace)
    return need


def held_bytes(input_types, output_types, attrs) -> int:
    """Bytes the chosen loop keeps for the plan's life (the planner's ``held`` rule): the
    stacked loop's reordered weight, or the few-position 1x1 loop's transposed one."""
    kind, state = _plan(None, input_types, output_types, attrs)
    if kind == "dense":
        return state[0].held_bytes
    if kind == "pointwise" and state[6] is not None:
        return state[6].held_bytes
    return 0


_CALLS = {"depthwise": _depthwise, "small": _small, "epilogue": _epilogue, "dense": _dense,
          "pointwise": _pointwise}


def _run(planned, ctx, inputs, outputs, attrs):
    kind, state = planned
    if kind == "composed":
        return state(ctx, inputs, outputs, attrs)
    return _CALLS[kind](state, ctx, inputs, outputs, attrs)


_warmed: set = set()


def _warm(kind: str, state, input_types, output_types) -> None:
    """Compile the chosen loops (or load them from numba's disk cache) while planning, not at
    the first run: their first call on arrays of the step's dtype, once per loop and dtype
    per process (the Conv of the epilogue path is not run)."""
    dtype = output_types[0].dtype
    if kind == "depthwise":
        loop, zeros, g, low, high = state
        if (loop, dtype) not in _warmed:
            x, w = (np.zeros(t.shape, t.dtype) for t in input_types[:2])
            y = np.zeros(output_types[0].shape, dtype)
            loop(x, w, zeros, y, g, low, high)
            loop(x, read_only(w), read_only(zeros), y, g, low, high)  # (a plan's constants)
            _warmed.add((loop, dtype))
        return
    if kind == "small":
        g, zeros, low, high, residual, _ = state
        if ("small", dtype, residual) not in _warmed:  # (a plan's weight and bias: read only)
            one = np.zeros((1, 1, 1, 1), dtype)
            fixed = np.zeros((1, 1, 1, 1), dtype)
            fixed.setflags(write=False)
            small_conv.conv_small_bounded(one, fixed, fixed[0, 0, 0], one if residual else None,
                                          one, (1, 1, 1, 1, 0, 0), low, high)
            _warmed.add(("small", dtype, residual))
        return
    if kind == "dense":
        state[0].warm()
    if kind == "pointwise" and state[6] is not None:
        state[6].warm()
    if kind == "pointwise" and state[7] is not None:
        flat_conv.flat_products()
    residual = state[3] if kind == "pointwise" else state[4]
    loop = bias_residual_and_bounds if residual else bias_and_bounds
    if (loop, dtype) not in _warmed:
        one = np.zeros((1, 1, 1, 1), dtype)
        for bias in (one[0, 0, 0], read_only(one[0, 0, 0])):  # (a plan's bias: read only)
            if loop is bias_residual_and_bounds:
                loop(one[0], bias, one[0], dtype.type(0), dtype.type(0))
            else:
                loop(one, bias, dtype.type(0), dtype.type(0))
        _warmed.add((loop, dtype))


class _FusedConv(PreparedKernel):
    """The FusedConv table entry of the compiled tier; ``bind`` hands back the chosen call
    itself (the composed kernel's own bound call where no loop applies)."""

    def __init__(self) -> None:
        super().__init__(_run, _plan)
        self.__name__ = self.__qualname__ = "fused_conv"
        self.fallback = composed
        self.workspace = workspace_bytes
        self.held = held_bytes

    def bind(self, backend, input_types, output_types, attrs):
        kind, state = _plan(backend, input_types, output_types, attrs)
        if kind == "composed":
            return state
        _warm(kind, state, input_types, output_types)
        if kind == "small":
            return _bind_small(state)
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
