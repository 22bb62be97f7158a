"""push_async (MXNet's PushAsync): an op finishes when its on_complete is called, from any
thread, and orders its readers exactly like a pushed op; errors follow the same contract."""
from __future__ import annotations

import threading
import time

import pytest

from portable.errors import EngineError
from tests.engine._deadline import deadline
from tests.engine._engines import ENGINES


def later(fn, delay=0.05):
    """Run ``fn`` on another thread after ``delay`` seconds (a communication thread)."""
    threading.Thread(target=lambda: (time.sleep(delay), fn()), daemon=True).start()


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(10)
def test_readers_wait_for_the_completion_not_for_fn(make_engine, kind, options) -> None:
    eng = make_engine(kind, **options)
    x, y = eng.new_var("x"), eng.new_var("y")
    box: list[str] = []

    def start(on_complete):
        box.append("started")
        later(lambda: (box.append("completed"), on_complete()))

    eng.push_async(start, writes=[x], name="async_write")
    eng.push(lambda: box.append("reader"), reads=[x], writes=[y], name="reader")
    eng.wait_for_var(y)
    assert box == ["started", "completed", "reader"]
    eng.wait_all()


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(10)
def test_an_error_given_to_on_complete_surfaces_at_the_wait(make_engine, kind, options) -> None:
    eng = make_engine(kind, **options)
    x, y = eng.new_var("x"), eng.new_var("y")
    ran: list[str] = []
    eng.push_async(lambda done: later(lambda: done(ValueError("link down"))), writes=[x],
                   name="allreduce[w]")
    eng.push(lambda: ran.append("reader"), reads=[x], writes=[y], name="reader")
    with pytest.raises(EngineError, match="allreduce\\[w\\]") as info:
        eng.wait_for_var(y)
    assert isinstance(info.value.__cause__, ValueError) and ran == []  # the reader was skipped
    with pytest.raises(EngineError):
        eng.wait_all()


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(10)
def test_fn_raising_before_completing_fails_the_op(make_engine, kind, options) -> None:
    eng = make_engine(kind, **options)
    x = eng.new_var("x")

    def start(on_complete):
        raise RuntimeError("could not start")

    eng.push_async(start, writes=[x], name="start_fails")
    with pytest.raises(EngineError, match="start_fails"):
        eng.wait_for_var(x)


@deadline(10)
def test_threaded_workers_are_free_while_async_ops_wait(make_engine) -> None:
    """Many pending asynchronous ops do not hold the single worker: other ops still run."""
    eng = make_engine("threaded", cpu_workers=1)
    completions = []
    vars_ = [eng.new_var(f"v{i}") for i in range(20)]
    for v in vars_:
        eng.push_async(completions.append, writes=[v], name="pending")
    other = eng.new_var("other")
    eng.push(lambda: None, writes=[other], name="unrelated")
    eng.wait_for_var(other)  # would hang if every async op held the worker
    for on_complete in list(completions):
        on_complete()
    eng.wait_all()
    assert len(completions) == 20


@deadline(10)
def test_completing_twice_is_refused(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1)
    x = eng.new_var("x")
    calls = []
    eng.push_async(calls.append, writes=[x], name="once")
    deadline_at = time.monotonic() + 5
    while not calls and time.monotonic() < deadline_at:
        time.sleep(0.01)
    calls[0]()
    with pytest.raises(EngineError, match="called twice"):
        calls[0]()
    eng.wait_all()
