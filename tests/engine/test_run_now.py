"""An INLINE op whose vars are all free runs at once in the pushing thread with no queued request
(the threaded engine's path for every small imperative op). These tests hold that path to the
contract of the general one: other threads see its vars busy while it runs, waits and
back-pressure count it, ``pending()`` shows it, and a var read and written by it (an in-place
update, ``x + x``) is released exactly once."""
from __future__ import annotations

import threading

import pytest

from portable.engine import INLINE
from portable.errors import EngineError
from tests.engine._deadline import deadline
from tests.engine._engines import ENGINES


class _Gate:
    """An op body that signals it started, then blocks until released."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.started.set()
        assert self.release.wait(5), "the gate was never released"


def _push_in_thread(eng, fn, reads=(), writes=(), name="gated") -> threading.Thread:
    thread = threading.Thread(target=lambda: eng.push(fn, list(reads), list(writes), INLINE, 0,
                                                      name))
    thread.start()
    return thread


@deadline(10)
def test_a_running_op_keeps_its_output_busy_for_other_threads(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1)
    x, y = eng.new_var("x"), eng.new_var("y")
    gate, order = _Gate(), []
    pusher = _push_in_thread(eng, lambda: (gate(), order.append("writer")), writes=[x])
    assert gate.started.wait(5)
    # This reader must wait for the writer running in the other thread, not run now.
    eng.push(lambda: order.append("reader"), reads=[x], writes=[y], device=INLINE,
             name="reader")
    assert order == []
    gate.release.set()
    pusher.join(5)
    eng.wait_for_var(y)
    assert order == ["writer", "reader"]


@deadline(10)
def test_a_running_op_keeps_its_input_from_writers_but_not_readers(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1)
    x, y, z, w = (eng.new_var(n) for n in "xyzw")
    gate, order = _Gate(), []
    pusher = _push_in_thread(eng, lambda: (gate(), order.append("slow reader")), reads=[x],
                             writes=[y])
    assert gate.started.wait(5)
    eng.push(lambda: order.append("second reader"), reads=[x], writes=[z], device=INLINE,
             name="reader")
    assert order == ["second reader"]  # readers share the var: it ran at once
    eng.push(lambda: order.append("writer"), writes=[x], device=INLINE, name="writer")
    eng.push(lambda: None, reads=[x], writes=[w], device=INLINE, name="after writer")
    assert order == ["second reader"]  # the writer waits for the slow reader
    gate.release.set()
    pusher.join(5)
    eng.wait_for_var(w)
    assert order == ["second reader", "slow reader", "writer"]


@deadline(10)
def test_wait_all_and_pending_see_an_op_running_in_another_thread(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1)
    x = eng.new_var("x")
    gate = _Gate()
    pusher = _push_in_thread(eng, gate, writes=[x], name="hand_off")
    assert gate.started.wait(5)
    (running,) = eng.pending()
    assert (running.name, running.state, running.device) == ("hand_off", "running", INLINE)
    done = []
    waiter = threading.Thread(target=lambda: (eng.wait_all(), done.append(True)))
    waiter.start()
    waiter.join(0.2)
    assert done == []  # the op has not finished: wait_all must not have returned
    gate.release.set()
    waiter.join(5)
    pusher.join(5)
    assert done == [True] and eng.pending() == []


@deadline(10)
def test_back_pressure_counts_ops_running_in_pushing_threads(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1, max_pending=1)
    x, y = eng.new_var("x"), eng.new_var("y")
    gate, order = _Gate(), []
    pusher = _push_in_thread(eng, lambda: (gate(), order.append("first")), writes=[x])
    assert gate.started.wait(5)
    second = _push_in_thread(eng, lambda: order.append("second"), writes=[y])
    second.join(0.2)
    assert second.is_alive() and order == []  # blocked in push: one op is pending already
    gate.release.set()
    pusher.join(5)
    second.join(5)
    assert order == ["first", "second"]


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(10)
def test_a_var_read_and_written_by_one_op_is_released_once(make_engine, kind, options) -> None:
    eng = make_engine(kind, **options)
    x, y = eng.new_var("x"), eng.new_var("y")
    box = [1]
    eng.push(lambda: box.append(box[-1] * 2), reads=[x, x], writes=[x], device=INLINE,
             name="double_in_place")
    eng.push(lambda: box.append(box[-1] + 1), reads=[x], writes=[y], device=INLINE,
             name="reader")
    eng.push(lambda: box.append(box[-1] * 10), reads=[x], writes=[x, x], device=INLINE,
             name="again")
    eng.wait_for_var(x)
    eng.wait_for_var(y)
    assert box == [1, 2, 3, 30] and eng.pending() == []
    eng.wait_all()


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(10)
def test_bad_arguments_still_raise_naming_the_op(make_engine, kind, options) -> None:
    eng = make_engine(kind, **options)
    other = make_engine(kind, **options)
    x, foreign = eng.new_var("x"), other.new_var("foreign")
    with pytest.raises(EngineError, match="another engine"):
        eng.push(lambda: None, reads=[foreign], writes=[x], device=INLINE, name="mixed")
    with pytest.raises(EngineError, match="expected an engine Var"):
        eng.push(lambda: None, writes=["x"], device=INLINE, name="not_a_var")
    eng.delete_var(x)
    with pytest.raises(EngineError, match="deleted"):
        eng.push(lambda: None, writes=[x], device=INLINE, name="late")
    with pytest.raises(EngineError, match="callable"):
        eng.push(42, writes=[eng.new_var("y")], device=INLINE, name="not_callable")


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(10)
def test_generators_of_vars_are_accepted(make_engine, kind, options) -> None:
    eng = make_engine(kind, **options)
    x, y = eng.new_var("x"), eng.new_var("y")
    box = []
    eng.push(lambda: box.append("x"), writes=(v for v in [x]), device=INLINE, name="fill")
    eng.push(lambda: box.append("y"), reads=(v for v in [x]), writes=iter([y]),
             device=INLINE, name="copy")
    eng.wait_for_var(y)
    assert box == ["x", "y"]


@deadline(20)
def test_many_threads_pushing_on_shared_vars_run_each_op_once_in_order(make_engine) -> None:
    """Each thread increments its own counter var and reads a shared one that a few writers
    update: every op must run exactly once, and each counter's updates in push order."""
    eng = make_engine("threaded", cpu_workers=2)
    shared = eng.new_var("shared")
    counts: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            mine = eng.new_var(f"mine{k}")
            values = counts[k] = []
            for i in range(400):
                if i % 50 == 0:
                    eng.push(lambda: None, reads=[shared], writes=[shared], device=INLINE,
                             name="bump_shared")
                eng.push(lambda i=i: values.append(i), reads=[mine, shared], writes=[mine],
                         device=INLINE, name="step")
            eng.wait_for_var(mine)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert not errors
    eng.wait_all()
    for k in range(4):
        assert counts[k] == list(range(400))
    assert eng.pending() == []
