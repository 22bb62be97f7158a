"""The INLINE device: an op that only hands its data to another thread (a communication queue)
starts in the thread that made it ready, not on a worker, with the ordering and error contract
of every other op."""
from __future__ import annotations

import threading

import pytest

from portable.engine import INLINE
from portable.errors import EngineError
from tests.engine._deadline import deadline
from tests.engine._engines import ENGINES


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(10)
def test_a_ready_inline_op_runs_in_the_pushing_thread_before_push_returns(
        make_engine, kind, options) -> None:
    eng = make_engine(kind, **options)
    x = eng.new_var("x")
    threads: list[str] = []
    eng.push(lambda: threads.append(threading.current_thread().name), writes=[x],
             device=INLINE, name="hand_off")
    assert threads == [threading.current_thread().name]
    eng.wait_all()


@deadline(10)
def test_an_inline_op_starts_in_the_worker_that_finished_its_producer(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1)
    x, y = eng.new_var("x"), eng.new_var("y")
    release = threading.Event()
    box: list[tuple[str, str]] = []
    eng.push(lambda: (release.wait(5), box.append(("producer", _thread()))), writes=[x],
             name="producer")
    eng.push_async(lambda done: (box.append(("inline", _thread())), done()), reads=[x],
                   writes=[x], device=INLINE, name="hand_off")
    eng.push(lambda: box.append(("reader", _thread())), reads=[x], writes=[y], name="reader")
    assert box == []  # not started by push: its producer has not run
    release.set()
    eng.wait_for_var(y)
    worker = box[0][1]
    assert worker.startswith("portable-engine-cpu")
    assert box == [("producer", worker), ("inline", worker), ("reader", box[2][1])]


@deadline(10)
def test_on_complete_from_another_thread_starts_the_next_inline_op_there(make_engine) -> None:
    """Two collectives on one array: the second starts in the communication thread that
    completed the first, and a later reader waits for both."""
    eng = make_engine("threaded", cpu_workers=1)
    x, y = eng.new_var("x"), eng.new_var("y")
    completions: list = []
    box: list[tuple[str, str]] = []

    def start(tag):
        def run(on_complete):
            box.append((tag, _thread()))
            completions.append(on_complete)
        return run

    eng.push_async(start("first"), reads=[x], writes=[x], device=INLINE, name="first")
    eng.push_async(start("second"), reads=[x], writes=[x], device=INLINE, name="second")
    eng.push(lambda: box.append(("reader", _thread())), reads=[x], writes=[y], name="reader")
    assert box == [("first", _thread())]
    comm = threading.Thread(target=lambda: completions.pop(0)(), name="comm")
    comm.start()
    comm.join()
    assert box[1] == ("second", "comm")
    completions.pop(0)()
    eng.wait_for_var(y)
    assert [tag for tag, _ in box] == ["first", "second", "reader"]


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(20)
def test_a_long_chain_of_inline_ops_completing_at_once_does_not_recurse(
        make_engine, kind, options) -> None:
    eng = make_engine(kind, **options)
    x = eng.new_var("x")
    count = []
    release = threading.Event()
    eng.push(lambda: release.wait(5), writes=[x], name="gate")
    for _ in range(3000):  # far past the interpreter's recursion limit if each nested
        eng.push_async(lambda done: (count.append(1), done()), reads=[x], writes=[x],
                       device=INLINE, name="step")
    release.set()
    eng.wait_for_var(x)
    assert len(count) == 3000


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(10)
def test_inline_failures_follow_the_error_contract(make_engine, kind, options) -> None:
    eng = make_engine(kind, **options)
    x, y = eng.new_var("x"), eng.new_var("y")
    ran: list[str] = []

    def boom() -> None:
        raise ValueError("queue closed")

    eng.push(boom, writes=[x], device=INLINE, name="hand_off[w]")
    eng.push(lambda: ran.append("inline reader"), reads=[x], writes=[y], device=INLINE,
             name="inline_reader")
    with pytest.raises(EngineError, match="hand_off\\[w\\]") as info:
        eng.wait_for_var(y)  # the reader was skipped and inherited the failure
    assert isinstance(info.value.__cause__, ValueError) and ran == []
    with pytest.raises(EngineError):
        eng.wait_all()


def _thread() -> str:
    return threading.current_thread().name


@pytest.mark.parametrize("kind, options", ENGINES)
@deadline(10)
def test_the_program_thread_is_never_an_idle_worker(make_engine, kind, options) -> None:
    """It keeps pushing the program's ops: blocking it on a collective would stall them."""
    eng = make_engine(kind, **options)
    x = eng.new_var("x")
    seen: list[bool] = []
    eng.push(lambda: seen.append(eng.idle_worker()), writes=[x], device=INLINE, name="check")
    eng.wait_all()
    assert seen == [False] and eng.idle_worker() is False


@deadline(10)
def test_a_worker_is_idle_only_while_no_ready_op_waits_for_its_pool(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1)
    x, y, z = eng.new_var("x"), eng.new_var("y"), eng.new_var("z")
    release = threading.Event()
    seen: dict[str, bool] = {}
    eng.push(lambda: (release.wait(5), seen.update(busy=eng.idle_worker())), writes=[x],
             name="first")
    eng.push(lambda: None, writes=[y], name="queued_behind_it")  # ready, waits for the worker
    release.set()
    eng.wait_all()
    eng.push(lambda: seen.update(alone=eng.idle_worker()), writes=[z], name="alone")
    eng.wait_all()
    assert seen == {"busy": False, "alone": True}


@deadline(10)
def test_an_inline_op_readied_by_a_worker_with_nothing_queued_sees_it_idle(make_engine) -> None:
    """The case the collective queue runs a round in: the worker that finished the last
    producer, whose next ops all wait for the hand-off."""
    eng = make_engine("threaded", cpu_workers=1)
    x, y = eng.new_var("x"), eng.new_var("y")
    release = threading.Event()
    seen: list[tuple[str, bool]] = []
    eng.push(lambda: release.wait(5), writes=[x], name="producer")
    eng.push(lambda: seen.append((_thread(), eng.idle_worker())), reads=[x], writes=[x],
             device=INLINE, name="hand_off")
    eng.push(lambda: None, reads=[x], writes=[y], name="consumer")  # waits for the hand-off
    release.set()
    eng.wait_all()
    assert len(seen) == 1 and seen[0][0].startswith("portable-engine-cpu") and seen[0][1]
