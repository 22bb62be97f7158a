"""Stress: many random ops pushed from several threads equal sequential execution in push order.

Every op does real NumPy work on (8, 8) float64 arrays, reading some vars and overwriting others
in place, so any missed dependency (a write racing a read, two writes reordered) changes the
bits of the result.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.engine._deadline import deadline

N_THREADS = 4
OPS_PER_THREAD = 3000          # 12,000 pushed ops per run
SHAPE = (8, 8)

ENGINE_CONFIGS = [
    pytest.param("naive", {}, id="naive"),
    pytest.param("threaded", {"cpu_workers": 2}, id="threaded-2workers"),
    pytest.param("threaded", {"cpu_workers": 3, "max_pending": 32}, id="threaded-3workers-bound32"),
]

Op = tuple[tuple[int, ...], tuple[int, ...], float]


def random_program(seed: int, n_ops: int, var_ids: list[int]) -> list[Op]:
    """Ops as (reads, writes, constant); about half also list a written var among reads."""
    rng = np.random.default_rng(seed)
    ops = []
    for _ in range(n_ops):
        n_writes = int(rng.integers(1, 3))
        n_reads = int(rng.integers(0, 4))
        chosen = [var_ids[i] for i in rng.choice(len(var_ids), n_writes + n_reads, replace=False)]
        writes, reads = tuple(chosen[:n_writes]), chosen[n_writes:]
        if rng.random() < 0.5:
            reads.append(writes[0])  # read-modify-write spelled out
        ops.append((tuple(reads), writes, float(rng.uniform(-1.0, 1.0))))
    return ops


def apply(arrays: list[np.ndarray], op: Op) -> None:
    """The op's kernel: every write becomes a function of the reads and of its old value."""
    reads, writes, const = op
    acc = np.full(SHAPE, const)
    for r in reads:
        acc = acc + np.tanh(arrays[r] @ arrays[r].T) * 0.25
    for w in writes:
        arrays[w][...] = np.tanh(arrays[w] @ acc * 0.5 + arrays[w] * 0.5)


def initial_arrays(n_vars: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1234)
    return [rng.standard_normal(SHAPE) for _ in range(n_vars)]


def push_all(engine, vars_, arrays, program, order=None, order_lock=None) -> None:
    for op in program:
        reads, writes, _ = op

        def fn(op=op) -> None:
            apply(arrays, op)

        args = dict(reads=[vars_[i] for i in reads], writes=[vars_[i] for i in writes],
                    name=f"op{len(order) if order is not None else ''}")
        if order_lock is None:
            engine.push(fn, **args)
        else:
            with order_lock:  # the reference replays exactly the order the engine saw
                order.append(op)
                engine.push(fn, **args)


def run_threads(targets) -> None:
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a pushing thread hung"


@pytest.mark.parametrize("kind, options", ENGINE_CONFIGS)
@deadline(30)
def test_shared_vars_match_sequential_push_order(make_engine, kind, options) -> None:
    n_vars = 56
    engine = make_engine(kind, **options)
    vars_ = [engine.new_var(f"v{i}") for i in range(n_vars)]
    arrays = initial_arrays(n_vars)
    order: list[Op] = []
    order_lock = threading.Lock()
    programs = [random_program(100 + t, OPS_PER_THREAD, list(range(n_vars)))
                for t in range(N_THREADS)]
    run_threads([lambda p=p: push_all(engine, vars_, arrays, p, order, order_lock)
                 for p in programs])
    for v in vars_:
        engine.wait_for_var(v)
    engine.wait_all()

    assert len(order) == N_THREADS * OPS_PER_THREAD
    reference = initial_arrays(n_vars)
    for op in order:
        apply(reference, op)
    assert not np.array_equal(reference[0], initial_arrays(n_vars)[0])  # the ops did work
    for i, (got, want) in enumerate(zip(arrays, reference)):
        assert np.array_equal(got, want), f"var v{i} differs from sequential execution"


@pytest.mark.parametrize("kind, options", ENGINE_CONFIGS)
@deadline(30)
def test_disjoint_vars_pushed_concurrently_match_sequential(make_engine, kind, options) -> None:
    per_thread = 16
    n_vars = per_thread * N_THREADS
    engine = make_engine(kind, **options)
    vars_ = [engine.new_var(f"v{i}") for i in range(n_vars)]
    arrays = initial_arrays(n_vars)
    programs = [random_program(200 + t, OPS_PER_THREAD,
                               list(range(t * per_thread, (t + 1) * per_thread)))
                for t in range(N_THREADS)]
    # No lock: the threads really push at the same time; each owns its vars, so each
    # thread's own push order fully defines its vars' results.
    run_threads([lambda p=p: push_all(engine, vars_, arrays, p) for p in programs])
    engine.wait_all()

    reference = initial_arrays(n_vars)
    for program in programs:
        for op in program:
            apply(reference, op)
    for i, (got, want) in enumerate(zip(arrays, reference)):
        assert np.array_equal(got, want), f"var v{i} differs from sequential execution"
