"""ThreadedEngine scheduling: back-pressure, pending(), priorities, read sharing, write
exclusion, waits and deletes. Blocking ops always wait with a timeout so a bug cannot hang."""
from __future__ import annotations

import threading
import time

import pytest

from portable.errors import EngineError
from tests.engine._deadline import deadline, wait_until


@deadline(10)
def test_push_blocks_at_max_pending_and_resumes(make_engine) -> None:
    bound = 4
    eng = make_engine("threaded", cpu_workers=1, max_pending=bound)
    gate = threading.Event()
    pushed = [0]

    def pusher() -> None:
        for i in range(bound + 6):
            v = eng.new_var(f"v{i}")
            eng.push(lambda: gate.wait(10), writes=[v], name=f"blocked{i}")
            pushed[0] += 1

    thread = threading.Thread(target=pusher, daemon=True)
    try:
        thread.start()
        assert wait_until(lambda: pushed[0] >= bound)
        time.sleep(0.3)  # give a missing bound the chance to show itself
        assert pushed[0] == bound and thread.is_alive()
    finally:
        gate.set()
    thread.join(5)
    assert not thread.is_alive() and pushed[0] == bound + 6
    eng.wait_all()


@deadline(10)
def test_pushes_from_inside_ops_bypass_the_bound(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1, max_pending=1)
    x = eng.new_var("x")
    children = [eng.new_var(f"c{i}") for i in range(10)]
    ran = []

    def parent() -> None:  # the bound is already reached by this very op
        for i, c in enumerate(children):
            eng.push(lambda i=i: ran.append(i), reads=[x], writes=[c], name=f"child{i}")

    eng.push(parent, writes=[x], name="parent")
    eng.wait_all()
    assert sorted(ran) == list(range(10))


@deadline(10)
def test_pending_names_blocked_ops_and_their_vars(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1)
    x, y = eng.new_var("x"), eng.new_var("y")
    started, gate = threading.Event(), threading.Event()
    try:
        eng.push(lambda: (started.set(), gate.wait(10)), writes=[x], name="holder")
        eng.push(lambda: None, reads=[x], writes=[y], name="consumer")
        eng.delete_var(x)
        assert started.wait(5)
        snapshot = {p.name: p for p in eng.pending()}
        assert list(snapshot) == ["holder", "consumer", "delete_var('x')"]
        assert snapshot["holder"].state == "running" and snapshot["holder"].waiting_for == ()
        assert snapshot["consumer"].state == "waiting"
        assert snapshot["consumer"].waiting_for == (x,)
        assert snapshot["delete_var('x')"].waiting_for == (x,)
        assert str(snapshot["consumer"]) == "op 'consumer' (waiting) waits for var 'x'"
    finally:
        gate.set()
    eng.wait_all()
    assert eng.pending() == []


@deadline(10)
def test_higher_priority_ready_ops_run_first(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1)
    started, gate = threading.Event(), threading.Event()
    order: list[str] = []
    try:
        eng.push(lambda: (started.set(), gate.wait(10)), writes=[eng.new_var("b")], name="busy")
        assert started.wait(5)  # the only worker is now busy: everything below queues
        jobs = [("p0", 0), ("p5", 5), ("m3", -3), ("p10", 10), ("p2a", 2), ("p7", 7), ("p2b", 2)]
        for name, prio in jobs:
            eng.push(lambda name=name: order.append(name), writes=[eng.new_var(name)],
                     priority=prio, name=name)
    finally:
        gate.set()
    eng.wait_all()
    assert order == ["p10", "p7", "p5", "p2a", "p2b", "p0", "m3"]  # ties keep push order


@deadline(15)
def test_reads_of_one_var_run_concurrently(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=2)
    x = eng.new_var("x")
    barrier = threading.Barrier(2, timeout=3)  # breaks (-> EngineError) if reads serialize
    eng.push(lambda: None, writes=[x], name="init")
    eng.push(barrier.wait, reads=[x], name="reader0")
    eng.push(barrier.wait, reads=[x], name="reader1")
    eng.wait_all()


@deadline(15)
def test_writes_exclude_readers_and_writers(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=3)
    x = eng.new_var("x")
    lock = threading.Lock()
    state = {"readers": 0, "writers": 0, "max_readers": 0}
    violations: list[str] = []
    log: list[str] = []

    def reader(i: int) -> None:
        with lock:
            if state["writers"]:
                violations.append(f"read{i} overlaps a write")
            state["readers"] += 1
            state["max_readers"] = max(state["max_readers"], state["readers"])
        time.sleep(0.002)
        with lock:
            state["readers"] -= 1
            log.append(f"r{i}")

    def writer(i: int) -> None:
        with lock:
            if state["writers"] or state["readers"]:
                violations.append(f"write{i} overlaps")
            state["writers"] += 1
        time.sleep(0.002)
        with lock:
            state["writers"] -= 1
            log.append(f"w{i}")

    pattern = "rrrwrrwwrrrrwrw" * 6
    for i, kind in enumerate(pattern):
        if kind == "r":
            eng.push(lambda i=i: reader(i), reads=[x], name=f"r{i}")
        else:
            eng.push(lambda i=i: writer(i), writes=[x], name=f"w{i}")
    eng.wait_all()
    assert violations == []
    assert state["max_readers"] >= 2
    # Every write sits exactly where push order puts it relative to the reads around it.
    writes = [i for i, k in enumerate(pattern) if k == "w"]
    positions = {entry: n for n, entry in enumerate(log)}
    for w in writes:
        for i, kind in enumerate(pattern):
            if kind == "r" and i < w:
                assert positions[f"r{i}"] < positions[f"w{w}"]
            if kind == "r" and i > w:
                assert positions[f"r{i}"] > positions[f"w{w}"]


@deadline(10)
def test_wait_for_var_waits_for_earlier_readers_too(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=2)
    x = eng.new_var("x")
    gate, returned = threading.Event(), threading.Event()
    done = []
    eng.push(lambda: (gate.wait(10), done.append("read")), reads=[x], name="slow_reader")
    waiter = threading.Thread(target=lambda: (eng.wait_for_var(x), returned.set()), daemon=True)
    try:
        waiter.start()
        assert not returned.wait(0.3)
    finally:
        gate.set()
    assert returned.wait(5) and done == ["read"]


@deadline(10)
def test_wait_all_with_nothing_pending_returns_and_starts_no_thread(make_engine) -> None:
    before = threading.active_count()
    eng = make_engine("threaded")
    eng.wait_all()
    eng.wait_for_var(eng.new_var("unused"))
    assert threading.active_count() == before


@deadline(10)
def test_each_device_has_its_own_workers(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1, device_workers=1)
    cpu_gate = threading.Event()
    ran = threading.Event()
    try:
        # The CPU pool's single worker is blocked; an op for another device still runs.
        eng.push(lambda: cpu_gate.wait(10), writes=[eng.new_var("c")], device="cpu(0)")
        eng.push(ran.set, writes=[eng.new_var("g")], device="opencl(0)")
        assert ran.wait(5)
    finally:
        cpu_gate.set()
    eng.wait_all()


@deadline(10)
def test_waits_raise_when_engine_is_shut_down_under_them(make_engine) -> None:
    eng = make_engine("threaded", cpu_workers=1)
    x = eng.new_var("x")
    gate = threading.Event()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            eng.wait_for_var(x)
        except EngineError as err:
            errors.append(err)

    try:
        eng.push(lambda: gate.wait(10), writes=[x], name="stuck")
        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        assert wait_until(lambda: len(eng.pending()) == 2)
        eng.shutdown(wait=False)
        waiter.join(5)
        assert not waiter.is_alive()
        assert len(errors) == 1 and "shut down" in str(errors[0])
        with pytest.raises(EngineError, match="shut down"):
            eng.wait_all()
    finally:
        gate.set()
