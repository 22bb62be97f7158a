"""The plain Conv's compiled kernel: the first of its tiers that takes the Conv.

1. The compiled dense plan (``dense_conv.DensePlan``, the FusedConv's) where it beats the xp
   kernel (``DensePlan.for_plain_conv``: its row-stacked dot products, or its compiled im2col
   before sgemm), the bias, if any, added after the sums as the xp kernel adds it. Training
   graphs keep their Convs plain (the BatchNorm after them runs on batch statistics), so this
   is the training forward's Conv.
2. The small loop (``small_conv.py``): a few channels on a small image, one compiled call.
3. The depthwise loop's kernel, which hands what it does not take to the xp kernel.

The chosen kernel is bound directly, with no layer of this module left at run time. The dense
plan sums in another order than the xp kernel's sgemm: its results match the xp kernel's to
rounding (and are the same from run to run).
"""
from __future__ import annotations

import functools

import numpy as np

from backends.numpy.jit import dense_conv
from backends.numpy.jit.depthwise import conv as depthwise_conv
from backends.numpy.jit.small_conv import (conv_small, prepare_small, run_small,
                                           step_with_bias, step_without_bias)
from backends.numpy.jit.support import contiguous
from backends.numpy.threads import several_threads, step_threads
from portable.backend import PreparedKernel


def _run_dense(plan, ctx, inputs, outputs, attrs) -> bool:
    """The dense plan's Conv, then the bias as the xp kernel adds it; False, running nothing,
    for arrays the plan does not index (not C-contiguous)."""
    x, w, y = inputs[0], inputs[1], outputs[0]
    if not contiguous(x, w, y):
        return False
    plan.conv(ctx, x, w, y)
    if len(inputs) > 2 and inputs[2] is not None:
        y += inputs[2].reshape(-1, 1, 1)
    return True


def _dense_step(state, ctx, inputs, outputs, attrs) -> None:
    """A plan step's call of the dense plan; the xp kernel for another layout, and for a
    Conv large enough to get every allowed BLAS thread while the run allows several
    (``threads.several_threads``: its sgemm uses them, the plan's loops one)."""
    plan, threaded = state
    if (threaded and several_threads()) or not _run_dense(plan, ctx, inputs, outputs, attrs):
        depthwise_conv.fallback(ctx, inputs, outputs, attrs)


def _choose(input_types, output_types, attrs):
    """("dense", (DensePlan, whether the step earns every allowed BLAS thread)), ("small",
    the small loop's state) or None (the other tiers)."""
    plan = dense_conv.DensePlan.for_plain_conv(input_types, output_types, attrs)
    if plan is not None:
        return "dense", (plan, step_threads("Conv", input_types, output_types, attrs))
    small = prepare_small(input_types, output_types, attrs)
    return None if small is None else ("small", small)


def _run(planned, ctx, inputs, outputs, attrs):
    kind, state = planned
    if kind == "other":
        return state(ctx, inputs, outputs, attrs)
    if kind == "dense":
        _dense_step(state, ctx, inputs, outputs, attrs)
    else:
        run_small(state, ctx, inputs, outputs, attrs)
    return None


def held_bytes(input_types, output_types, attrs) -> int:
    """Bytes the chosen tier keeps for the plan's life (the planner's ``held`` rule): the
    stacked loop's reordered weight."""
    chosen = _choose(input_types, output_types, attrs)
    return chosen[1][0].held_bytes if chosen is not None and chosen[0] == "dense" else 0


class _Tiers(PreparedKernel):
    """Conv: the dense plan or the small loop where they apply, else the depthwise kernel (itself
    the xp kernel where its loop does not apply). ``bind`` hands back the chosen tier's own
    call, so a plan step runs it without this class in between."""

    def __init__(self) -> None:
        super().__init__(_run, self._plan)
        self.__name__ = self.__qualname__ = "conv"
        self.fallback = depthwise_conv.fallback
        self.held = held_bytes
        if getattr(depthwise_conv, "workspace", None) is not None:
            self.workspace = depthwise_conv.workspace

    @staticmethod
    def _plan(backend, input_types, output_types, attrs):
        chosen = _choose(input_types, output_types, attrs)
        if chosen is not None:
            return chosen
        return "other", depthwise_conv.bind(backend, input_types, output_types, attrs)

    def bind(self, backend, input_types, output_types, attrs):
        kind, state = self._plan(backend, input_types, output_types, attrs)
        if kind == "other":
            return state
        if kind == "dense":
            state[0].warm()  # (compiled, or loaded from disk, while planning)
            return functools.partial(_dense_step, state)
        conv_small(*(np.zeros(t.shape, t.dtype) for t in input_types[:2]),
                   state[0], np.zeros(output_types[0].shape, output_types[0].dtype),
                   state[1])  # compiled (or loaded from disk) while planning
        biased = len(input_types) > 2 and input_types[2] is not None
        return functools.partial(step_with_bias if biased else step_without_bias, state)

    # What the tests call the compiled kernel without its xp fallback: (the small loop's state,
    # the dense plan, the depthwise loop's state), one of them set.
    @staticmethod
    def compiled_prepare(input_types, output_types, attrs):
        chosen = _choose(input_types, output_types, attrs)
        if chosen is not None:
            if chosen[0] == "small":
                return chosen[1], None, None
            return None, chosen[1][0], None
        other = depthwise_conv.compiled_prepare(input_types, output_types, attrs)
        return None if other is None else (None, None, other)

    @staticmethod
    def compiled_run(state, ctx, inputs, outputs, attrs) -> bool:
        small, plan, other = state
        if small is not None:
            return run_small(small, ctx, inputs, outputs, attrs)
        if plan is not None:
            plan.warm()
            return _run_dense(plan, ctx, inputs, outputs, attrs)
        return depthwise_conv.compiled_run(other, ctx, inputs, outputs, attrs)


conv = _Tiers()

kernels = {"Conv": conv}
