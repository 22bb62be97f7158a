"""The error contract: failures surface at waits (naming the op), propagate to readers, are
cleared by a fresh write, and never stop the engine."""
from __future__ import annotations

import threading

import pytest

from portable.errors import EngineError
from tests.engine._deadline import deadline
from tests.engine._engines import ENGINES


def boom() -> None:
    raise ValueError("boom in kernel")


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(10)
def test_failure_surfaces_at_waits_and_propagates(make_engine, kind, options) -> None:
    eng = make_engine(kind, **options)
    x, y, other, z = (eng.new_var(n) for n in ("x", "y", "other", "z"))
    ran: list[str] = []
    counter = {"z": 0}

    eng.push(boom, writes=[x], name="bad_kernel")  # must not raise here
    eng.push(lambda: ran.append("reader"), reads=[x], writes=[y], name="reader")
    for _ in range(50):  # unrelated work keeps running after the failure
        eng.push(lambda: counter.update(z=counter["z"] + 1), reads=[other], writes=[z],
                 name="inc")

    with pytest.raises(EngineError, match="bad_kernel") as info:
        eng.wait_for_var(x)
    assert isinstance(info.value.__cause__, ValueError)
    assert "boom in kernel" in str(info.value)
    with pytest.raises(EngineError, match="bad_kernel") as info:
        eng.wait_for_var(y)  # the dependent reader was skipped; its output carries the error
    assert "reader" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)
    assert ran == []
    eng.wait_for_var(z)
    assert counter["z"] == 50

    with pytest.raises(EngineError, match="bad_kernel"):
        eng.wait_all()
    eng.wait_all()  # each failure is reported by one wait_all only
    with pytest.raises(EngineError, match="bad_kernel"):
        eng.wait_for_var(x)  # but the var still holds no valid data

    # An in-place update of a failed var stays failed (it reads the var).
    eng.push(lambda: ran.append("inplace"), reads=[x], writes=[x], name="inplace")
    with pytest.raises(EngineError, match="bad_kernel"):
        eng.wait_for_var(x)
    # A write without a read gives fresh data and clears the error.
    eng.push(lambda: ran.append("refill"), writes=[x], name="refill")
    eng.push(lambda: ran.append("reader2"), reads=[x], writes=[y], name="reader2")
    eng.wait_for_var(y)
    eng.wait_for_var(x)
    assert ran == ["refill", "reader2"]
    eng.wait_all()


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(10)
def test_engine_keeps_working_after_failures(make_engine, kind, options) -> None:
    eng = make_engine(kind, **options)
    vs = [eng.new_var(f"v{i}") for i in range(4)]

    def exit_op() -> None:
        raise SystemExit(3)  # even a BaseException must not kill a worker

    eng.push(boom, writes=[vs[0]], name="first_bad")
    eng.push(exit_op, writes=[vs[1]], name="second_bad")
    with pytest.raises(EngineError, match="first_bad") as info:
        eng.wait_all()
    assert "1 more op(s) failed" in str(info.value)
    with pytest.raises(EngineError, match="second_bad"):
        eng.wait_for_var(vs[1])

    results = []
    for i in range(20):
        eng.push(lambda i=i: results.append(i), writes=[vs[2]], name=f"ok{i}")
    eng.wait_for_var(vs[2])
    assert results == list(range(20))
    eng.wait_all()


@deadline(10)
def test_waiting_from_inside_an_op_is_an_error_not_a_hang(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1)
    x, y = eng.new_var("x"), eng.new_var("y")
    eng.push(lambda: eng.wait_for_var(x), writes=[y], name="waits_inside")
    with pytest.raises(EngineError, match="waits_inside") as info:
        eng.wait_for_var(y)
    assert "inside a running engine op" in str(info.value)


@pytest.mark.parametrize("kind", ["naive", "threaded"])
@deadline(10)
def test_bad_arguments_raise_engine_error(make_engine, kind) -> None:
    eng = make_engine(kind)
    foreign = make_engine(kind).new_var("foreign")
    x = eng.new_var("x")
    with pytest.raises(EngineError, match="callable"):
        eng.push(42, writes=[x])
    with pytest.raises(EngineError, match="another engine"):
        eng.push(lambda: None, reads=[foreign])
    with pytest.raises(EngineError, match="Var"):
        eng.push(lambda: None, writes=["x"])
    eng.delete_var(x)
    with pytest.raises(EngineError, match="deleted"):
        eng.push(lambda: None, reads=[x], name="late")
    with pytest.raises(EngineError, match="already deleted"):
        eng.delete_var(x)
    with pytest.raises(EngineError, match="deleted"):
        eng.wait_for_var(x)
    eng.wait_all()


@deadline(10)
def test_shut_down_engine_refuses_work_and_stops_its_threads(make_engine) -> None:
    before = set(threading.enumerate())
    eng = make_engine("threaded", cpu_workers=2)
    x = eng.new_var("x")
    eng.push(lambda: None, writes=[x])
    workers = set(threading.enumerate()) - before
    assert len(workers) == 2
    eng.shutdown()
    assert not any(t.is_alive() for t in workers)
    with pytest.raises(EngineError, match="shut down"):
        eng.push(lambda: None, writes=[x])
    eng.wait_all()  # nothing pending: returns
