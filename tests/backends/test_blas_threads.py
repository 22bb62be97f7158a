"""BLAS threads per plan step (``backends/numpy/threads.py``): GEMM sizes against their closed
forms, small GEMMs on one thread and large ones on what the run allows, the allowance read at
each run (so a user's limit holds) and restored after it, and one answer per input."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from backends.numpy import threads
from portable.ir.graph import TensorType

threadpoolctl = pytest.importorskip("threadpoolctl", reason="threads are switched through it")


def T(*shape):
    return TensorType(shape, np.float32)


def test_gemm_sizes_are_the_multiply_adds():
    assert threads.gemm_flops("MatMul", [T(8, 5, 7), T(7, 3)], [T(8, 5, 3)], {}) == 8 * 5 * 3 * 7
    assert threads.gemm_flops("Gemm", [T(7, 5), T(7, 3)], [T(5, 3)], {"transA": 1}) == 5 * 3 * 7
    # Conv: every output element sums C/group x kernel products
    conv = threads.gemm_flops("Conv", [T(2, 4, 9, 9), T(6, 2, 3, 3)], [T(2, 6, 7, 7)],
                              {"group": 2})
    assert conv == 2 * 6 * 7 * 7 * (2 * 3 * 3)
    # ConvTranspose: every input element reaches M/group x kernel outputs
    assert threads.gemm_flops("ConvTranspose", [T(1, 4, 5, 5), T(4, 3, 3, 3)],
                              [T(1, 3, 7, 7)], {}) == 4 * 5 * 5 * 3 * 3 * 3
    # dW: every dY element meets C/group x kernel inputs
    assert threads.gemm_flops("portable.ConvGradWeight", [T(2, 4, 9, 9), T(2, 6, 7, 7)],
                              [T(6, 4, 3, 3)], {}) == 2 * 6 * 7 * 7 * 4 * 3 * 3
    assert threads.gemm_flops("Relu", [T(4)], [T(4)], {}) is None
    assert threads.gemm_flops("MatMul", [T(None, 7), T(7, 3)], [T(None, 3)], {}) is None


def test_small_gemms_take_one_thread_and_large_ones_every_allowed_thread():
    n = round(threads.PARALLEL_FLOPS ** (1 / 3)) + 1
    assert threads.step_threads("MatMul", [T(n, n), T(n, n)], [T(n, n)], {}) is True
    assert threads.step_threads("MatMul", [T(16, 16), T(16, 16)], [T(16, 16)], {}) is False
    assert threads.step_threads("Add", [T(16), T(16)], [T(16)], {}) is None


def _model(n: int):
    """MatMul (large: n x n by n x n) -> MatMul (small: by n x 1) -> Relu, planned for the
    CPU backend."""
    from portable.executor.segments import compile_graph
    from portable.ir.builder import GraphBuilder

    rng = np.random.default_rng(0)
    b = GraphBuilder("threads")
    x = b.input("x", (n, n), "float32")
    big = b.const(rng.standard_normal((n, n)).astype(np.float32))
    small = b.const(rng.standard_normal((n, 1)).astype(np.float32))
    y = b.op("Relu", b.op("MatMul", b.op("MatMul", x, big), small))
    return compile_graph(b.build([y]), pt.cpu())


def test_a_run_switches_per_step_and_restores_what_the_process_allows(monkeypatch):
    backend = pt.cpu().backend
    if not backend.threads_allowed() and threads.blas_threads.allowed <= 1:
        pytest.skip("the BLAS here runs one thread: there is nothing to switch")
    set_to = []
    real = threads.blas_threads.use
    monkeypatch.setattr(threads.blas_threads, "use", lambda n: set_to.append(n) or real(n))
    n = round(threads.PARALLEL_FLOPS ** (1 / 3)) + 1
    plan = _model(n)
    x = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    first = plan.run({"x": x})[0].copy()
    allowed = threads.blas_threads.allowed
    assert allowed > 1 and allowed in set_to and 1 in set_to, set_to
    controller = threadpoolctl.ThreadpoolController()
    assert max(lib.get_num_threads() for lib in controller.select(user_api="blas")
               .lib_controllers) == allowed  # restored after the run
    for _ in range(3):  # one input, one answer
        assert plan.run({"x": x})[0].tobytes() == first.tobytes()
    set_to.clear()
    with threadpoolctl.threadpool_limits(1, user_api="blas"):  # a user's limit holds
        plan.run({"x": x})
        assert all(n == 1 for n in set_to), set_to


def test_the_count_read_directly_is_threadpoolctls():
    """``begin`` reads each library's count through the C symbol it looked up once: the
    count threadpoolctl reports, under the process's allowance and under a user's limit."""
    libraries = threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers
    if not libraries:
        pytest.skip("threadpoolctl finds no BLAS here")
    getters = [threads._getter(lib) for lib in libraries]
    assert [get() for get in getters] == [lib.get_num_threads() for lib in libraries]
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        assert [get() for get in getters] == [1] * len(libraries)
        assert threads.blas_threads.begin() == 0  # (one thread allowed: nothing to switch)
    assert [get() for get in getters] == [lib.get_num_threads() for lib in libraries]


def test_a_blas_loaded_after_the_users_limit_does_not_lift_it(monkeypatch):
    """numba imports SciPy, whose OpenBLAS starts at one thread per core after the user limited
    NumPy's to one: the run's allowance is the fewest threads any library runs."""
    counts = [1, 2]  # (NumPy's, limited; SciPy's, loaded later at its default)
    set_to = []
    blas = threads.BlasThreads()
    monkeypatch.setattr(blas, "_libraries", ["numpy's", "scipy's"])
    monkeypatch.setattr(blas, "_getters", [lambda: counts[0], lambda: counts[1]])
    monkeypatch.setattr(blas, "_setters", [set_to.append, set_to.append])
    assert blas.begin() == 0 and blas.allowed == 1  # one thread allowed: nothing to switch
    counts[0] = 2  # the user lifts the limit: both run two
    assert blas.begin() == 2
    blas.use(1)
    assert set_to == [1, 1]  # every library switched alike

