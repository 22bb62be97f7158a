"""BLAS threads chosen per plan step from its size, so that a second thread runs only where it
can pay.

OpenBLAS splits every GEMM over all its threads, however small. On a small GEMM the split
costs more than it saves, and on a machine where another process holds a core it costs far
more: the threads wait for each other by spinning, and one of them waits for a core
(``portable train --model lenet`` took 11.2 s with the default two threads beside one busy
process, 3.3 s with one; ``benchmarks/blas_threads.py`` times a 96x96 GEMM at 0.07 ms on one
thread and 16 ms on two on a loaded machine). So each plan step whose kernel is a GEMM
(MatMul, Gemm, the convolutions) is classed at plan time from its shapes: under
``PARALLEL_FLOPS`` multiply-adds it runs on one thread, from there on every thread the run
allows. Other steps leave the threads as they are.

The class never follows timings or load: OpenBLAS may round differently at another thread
count, and one input must give one answer. The allowance is what the process allows when a
run starts (``OPENBLAS_NUM_THREADS``, ``threadpoolctl.threadpool_limits``, ``portable
launch``'s per-rank share); the run restores it when it ends. Without threadpoolctl
(scikit-learn brings it) or a BLAS it can find, nothing is switched.
"""
from __future__ import annotations

import math
from typing import Any

# Multiply-adds of a GEMM from which every allowed thread is used: above every GEMM of the
# README's main job (LeNet at batch 32: at most 51 M), below ResNet-50's 3x3 layers (116 M at
# batch 1). benchmarks/blas_threads.py shows both sides: the GEMMs by size at one and two
# threads, and the main job beside a busy process.
PARALLEL_FLOPS = 64_000_000


def _prod(shape) -> int:
    return math.prod(int(d) for d in shape)


def _matmul(types, outs, attrs) -> int:
    return _prod(outs[0].shape) * int(types[0].shape[-1])


def _gemm(types, outs, attrs) -> int:
    a = types[0].shape
    return _prod(outs[0].shape) * int(a[0] if attrs.get("transA") else a[-1])


def _conv(types, outs, attrs) -> int:
    w = types[1].shape  # (M, C/group, *kernel): each output element sums C/group * kernel
    return _prod(outs[0].shape) * _prod(w[1:])


def _conv_transpose(types, outs, attrs) -> int:
    w = types[1].shape  # (C, M/group, *kernel): each input element reaches M/group * kernel
    return _prod(types[0].shape) * _prod(w[1:])


def _conv_grad_weight(types, outs, attrs) -> int:
    return _prod(types[1].shape) * _prod(outs[0].shape[1:])  # dY elements x (C/group * kernel)


# Multiply-adds of the steps whose kernels call a BLAS GEMM, by op.
GEMM_FLOPS = {
    "MatMul": _matmul, "Gemm": _gemm, "portable.FusedGemm": _gemm,
    "Conv": _conv, "portable.FusedConv": _conv, "ConvTranspose": _conv_transpose,
    "portable.ConvGradWeight": _conv_grad_weight,
}


def gemm_flops(op: str, input_types: list, output_types: list, attrs: dict) -> int | None:
    """Multiply-adds of a GEMM step, or None when its kernel is not a GEMM (or its shapes are
    not all known)."""
    rule = GEMM_FLOPS.get(op)
    if rule is None or not output_types or output_types[0] is None:
        return None
    try:
        return int(rule(input_types, output_types, attrs))
    except (TypeError, IndexError, AttributeError):  # a symbolic dim: leave its threads be
        return None


class BlasThreads:
    """Switches the process's BLAS thread count between one and what the run allows."""

    def __init__(self) -> None:
        self._libraries: list | None = None
        self._setters: list = []
        self._getters: list = []
        self.current = 0  # the count last set or read (0: not known)
        self.allowed = 0  # what the process allows: the count found when someone else set it

    def _load(self) -> list:
        if self._libraries is None:
            try:
                import threadpoolctl
            except ImportError:
                self._libraries = []
            else:
                self._libraries = threadpoolctl.ThreadpoolController().select(
                    user_api="blas").lib_controllers
            self._setters = [_setter(lib) for lib in self._libraries]
            self._getters = [_getter(lib) for lib in self._libraries]
        return self._libraries

    def begin(self) -> int:
        """The thread count the process allows now (0 when there is nothing to switch).

        A count that differs from the last one set here was set by someone else (the
        environment, ``threadpool_limits``): it becomes the allowance. One equal to it is this
        class's own doing (another plan running at the same time switched to one thread), and
        the allowance stays."""
        if self._libraries is None:
            self._load()
        getters = self._getters
        if not getters:
            return 0
        # (every plan run starts here: one library, the usual case, is one direct call). With
        # several, the fewest threads any of them runs: a BLAS loaded after the user's limit
        # (numba imports SciPy, which brings its own OpenBLAS at one thread per core) must not
        # lift the limit set on the others.
        now = getters[0]() if len(getters) == 1 else min(get() for get in getters)
        if now != self.current:
            self.allowed = now
        self.current = now
        return self.allowed if self.allowed > 1 else 0

    def use(self, count: int) -> None:
        if count != self.current:
            for setter in self._setters:
                setter(count)
            self.current = count


def _setter(library: Any) -> Any:
    """A function setting ``library``'s thread count. threadpoolctl looks the C symbol up on
    every call (10 us, more than a small step's kernel); for OpenBLAS it is looked up once."""
    find = getattr(library, "_get_symbol", None)  # (threadpoolctl's OpenBLAS controller)
    symbol = find("openblas_set_num_threads") if find is not None else None
    return symbol if symbol is not None else library.set_num_threads


def _getter(library: Any) -> Any:
    """A function reading ``library``'s thread count, looked up once as ``_setter`` is (0.2-0.9
    us a run through threadpoolctl, which looks the symbol up on every call). The symbol is
    the one threadpoolctl reads: OpenMP's count where OpenBLAS runs on OpenMP."""
    find = getattr(library, "_get_symbol", None)
    layer = getattr(library, "threading_layer", None)
    name = "omp_get_max_threads" if layer == "openmp" else "openblas_get_num_threads"
    symbol = find(name) if find is not None else None
    return symbol if symbol is not None else library.get_num_threads


blas_threads = BlasThreads()


def step_threads(op: str, input_types: list, output_types: list, attrs: dict) -> bool | None:
    """Whether a plan step runs on every allowed thread (True), on one (False), or leaves the
    threads as they are (None: its kernel is not a GEMM). Decided by size alone, never by
    timing: OpenBLAS may round differently at another thread count (squeezenet's output
    changed in its last bits), so a choice that followed the load would make one input give
    two answers."""
    flops = gemm_flops(op, input_types, output_types, attrs)
    return None if flops is None else flops >= PARALLEL_FLOPS


def several_threads() -> bool:
    """Whether BLAS runs on more than one thread now: inside a plan run, whether this step was
    given every allowed thread. The compiled Conv loops run on one thread, so a step of the
    size that earns several (``step_threads``) hands its GEMM to sgemm on them instead
    (ResNet-18's training step at two threads: 667-759 ms with sgemm there, 825-851 ms with
    the single-threaded loops; at one thread the loops win)."""
    return blas_threads.current > 1
