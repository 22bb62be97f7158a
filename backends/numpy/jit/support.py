"""What every compiled kernel shares: which calls it takes, how it hands the others back to the
xp kernel it replaces, the window spans its loops walk, and when it runs in parallel.

A compiled kernel is a PreparedKernel (DESIGN.md section 8). Its plan-time ``prepare`` looks at
the types and attributes: for the one narrow configuration it supports (2-D windows,
float32/float64) it fixes the geometry and the loop to call; for anything else it prepares
the xp kernel instead, so the results of other configurations never change. Its run-time part
only checks that the arrays are C-contiguous (the planner's buffers are; a caller's view may
not be, and then the xp kernel runs) and calls the loop. Geometry always comes from
``portable.ops.conv`` (``pool_geometry``, ``window_geometry``, ``transpose_geometry``): the
loops only read it.

The loops index with ``np.uint64`` where an index is known to be inside the array: numba
then skips its negative-index wraparound, which otherwise keeps LLVM from vectorising the
inner loops (2-3x slower).
"""
from __future__ import annotations

import functools
import importlib
from typing import Callable

from backends.numpy.jit import point_numba_cache

point_numba_cache()  # (before numba is imported: it reads NUMBA_CACHE_DIR then)

import numba  # noqa: E402
import numpy as np  # noqa: E402

from portable.backend import PreparedKernel, bound_kernel  # noqa: E402
from portable.ops.conv import Geometry  # noqa: E402

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

# Multiply-adds (or compares) below which one thread runs the planes: about 2-4 ms of serial
# work. Measured on 2 shared cores (load ~3): a parallel launch then cost 12-16 ms waiting for
# both threads to be scheduled, and first paid off at about 2^23 elements (a 256x112x112
# pool); on an idle many-core machine it pays off far sooner, but the serial loops already
# run the model-zoo layers in a few milliseconds or less, and the threaded engine may run
# other kernels beside this one.
PARALLEL_WORK = 1 << 22

# Options of every compiled loop: cached on disk (compiled once per dtype per machine), and
# NumPy's error model so that a window with nothing to average divides 0 by 0 to NaN (as the
# xp kernel does) instead of raising ZeroDivisionError.
JIT = dict(cache=True, nogil=True, error_model="numpy")


def floats(*types) -> bool:
    """Whether the tensor types (None entries skipped) are static, 4-D and of one float
    dtype: what the compiled loops are written for."""
    present = [t for t in types if t is not None]
    return (bool(present) and present[0].dtype in FLOATS
            and all(t.dtype == present[0].dtype and len(t.shape) == 4 and t.is_static
                    for t in present))


def read_only(array):
    """A read-only view of ``array``: what a plan hands a kernel for a constant (its weights,
    ``portable.executor.compiled``). numba compiles a loop separately for read-only arrays, so
    the warm-up calls take these too: else that compile (and its memory) falls in the first
    run."""
    view = array.view()
    view.setflags(write=False)
    return view


def contiguous(*arrays) -> bool:
    """Whether the arrays (None entries skipped) are C-contiguous NumPy arrays, the only
    layout the loops index."""
    for a in arrays:  # (a plain loop: 0.19 us for three arrays against 0.31 for all())
        if a is not None and not (isinstance(a, np.ndarray) and a.flags.c_contiguous):
            return False
    return True


def tiles(geom: Geometry, x_shape) -> bool:
    """Whether a pool's windows tile planes of ``x_shape``: stride = kernel, no padding, no
    dilation, and every window inside (no partial window at the end, as ceil_mode can make)."""
    (kh, kw), (sh, sw) = geom.kernel, geom.strides
    return (kh == sh and kw == sw and tuple(geom.dilations) == (1, 1)
            and not any(geom.head) and geom.out[0] * kh <= x_shape[0]
            and geom.out[1] * kw <= x_shape[1])


def window_tuple(geom: Geometry) -> tuple[int, ...]:
    """(kh, kw, sh, sw, dh, dw, head_h, head_w): the 2-D geometry as the loops take it."""
    return (*geom.kernel, *geom.strides, *geom.dilations, *geom.head)


def parallel(planes: int, work: int) -> bool:
    """Run over planes in parallel when there are several, the work pays for the launch and
    numba's threading layer is thread-safe: the threaded engine may launch two kernels at
    once, which the fallback ``workqueue`` layer answers by aborting the process."""
    return (planes > 1 and work >= PARALLEL_WORK and numba.config.NUMBA_NUM_THREADS > 1
            and _threadsafe_layer())


@functools.cache
def _threadsafe_layer() -> bool:
    """Whether numba will pick TBB or OpenMP (it prefers them, in that order, to workqueue)."""
    if numba.config.THREADING_LAYER not in ("default", "safe", "threadsafe", "tbb", "omp"):
        return False
    for layer in ("tbbpool", "omppool"):
        try:
            importlib.import_module(f"numba.np.ufunc.{layer}")
            return True
        except ImportError:
            continue
    return False


def override(fallback: Callable, prepare: Callable) -> Callable:
    """Decorator making a compiled kernel of ``run(state, ctx, inputs, outputs, attrs)``.

    ``prepare(input_types, output_types, attrs)`` returns the state the loop needs, or None
    when the configuration is not one the loop supports; then the xp kernel ``fallback`` is
    prepared in its place (its own plan-time state, e.g. Conv's Winograd choice) and runs.
    ``run`` returns False when the arrays it is given do not suit the loop (a strided view):
    the xp kernel runs those calls. A ``workspace`` rule of the fallback carries over, so the
    planner still reserves the scratch the xp kernel takes. A plan step is bound to
    ``direct_call`` (or to the fallback's own bound call where the loop does not apply).
    """
    def wrap(run: Callable) -> PreparedKernel:
        def plan(backend, input_types, output_types, attrs):
            state = prepare(input_types, output_types, attrs)
            if state is None:
                return None, bound_kernel(fallback, backend, input_types, output_types, attrs)
            _warm(run, state, backend, input_types, output_types, attrs)
            return state, None

        def call(planned, ctx, inputs, outputs, attrs):
            state, other = planned
            if other is not None:
                return other(ctx, inputs, outputs, attrs)
            if not run(state, ctx, inputs, outputs, attrs):
                return fallback(ctx, inputs, outputs, attrs)
            return None

        def bind(backend, input_types, output_types, attrs):
            state, other = plan(backend, input_types, output_types, attrs)
            return other if other is not None else direct_call(run, fallback, state)

        functools.update_wrapper(call, run)
        kernel = PreparedKernel(call, plan)
        kernel.bind = bind
        if getattr(fallback, "workspace", None) is not None:
            kernel.workspace = fallback.workspace
        kernel.fallback, kernel.compiled_prepare, kernel.compiled_run = fallback, prepare, run
        return kernel
    return wrap


def direct_call(run: Callable, fallback: Callable, state) -> Callable:
    """A plan step's call of ``run`` on its planned ``state``: one Python function between
    the executor and the loop's wrapper, where ``PreparedKernel.bind``'s partial went through
    ``call`` first (0.3-0.5 us a step). ``fallback`` takes the calls ``run`` declines."""
    def step(ctx, inputs, outputs, attrs):
        if not run(state, ctx, inputs, outputs, attrs):
            fallback(ctx, inputs, outputs, attrs)

    step.__name__ = step.__qualname__ = getattr(run, "__name__", "step")
    return step


_warmed: set = set()


def _warm(run: Callable, state, backend, input_types, output_types, attrs) -> None:
    """Run a loop once on zeros of the step's types, while planning. numba compiles a loop (or
    loads it from its disk cache) on its first call: that time, and the Python memory it
    takes, belong to planning, not to the first run, whose peak memory the planner predicts.
    Once per loop, types and shapes per process."""
    key = (run, tuple(None if t is None else (t.shape, t.dtype)
                      for t in list(input_types) + list(output_types)))
    if key in _warmed:
        return
    from portable.backend import KernelContext

    zeros = [None if t is None else np.zeros(t.shape, t.dtype) for t in input_types]
    outputs = [None if t is None else np.zeros(t.shape, t.dtype) for t in output_types]
    ctx = KernelContext(np, np.random.default_rng(0), backend)
    run(state, ctx, zeros, outputs, attrs)
    if any(a is not None for a in zeros[1:]):  # (the operands a plan may hold as constants)
        run(state, ctx, zeros[:1] + [None if a is None else read_only(a) for a in zeros[1:]],
            outputs, attrs)
    _warmed.add(key)


@numba.njit(inline="always", **JIT)
def span(start: int, step: int, count: int, size: int) -> tuple[int, int]:
    """The range [lo, hi) of window indices o < count whose element o * step + start lies
    inside [0, size): the windows that read a given kernel offset inside the array."""
    lo = 0 if start >= 0 else (step - 1 - start) // step
    last = size - 1 - start
    hi = 0 if last < 0 else min(count, last // step + 1)
    return lo, max(lo, hi)


@numba.njit(**JIT)
def same_size(x, y, g) -> bool:
    """Whether a 2-D pool of planes x (P, H, W) into y at geometry ``g`` (``window_tuple``)
    has stride 1 and an output as large as its input (a 3x3 pool with pads of 1)."""
    return g[2] == 1 and g[3] == 1 and x.shape[1:] == y.shape[1:]


@numba.njit(**JIT)
def inside_span(kernel: int, dilation: int, head: int, size: int) -> tuple[int, int]:
    """The outputs [lo, hi) along one axis of such a pool whose windows lie wholly inside
    the input: the ones whose shifted reads stay inside their own row (plane)."""
    lo, hi = 0, size
    for j in range(kernel):
        first, last = span(j * dilation - head, 1, size, size)
        lo, hi = max(lo, first), min(hi, last)
    return lo, max(lo, hi)
