"""Choosing the process-wide engine: PORTABLE_ENGINE, set_engine, use_engine, lazy start."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import portable.engine as engine_pkg
from portable.engine import NaiveEngine, ThreadedEngine, get_engine, set_engine, use_engine
from portable.errors import EngineError
from tests.engine._deadline import deadline

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_global_engine():
    """Let the test create the global engine from the env; restore the previous one after."""
    previous = set_engine(None)
    yield
    created = set_engine(previous)
    if created is not None and created is not previous:
        created.shutdown(wait=False)


@deadline(10)
def test_portable_engine_env_selects_the_engine(monkeypatch, fresh_global_engine) -> None:
    monkeypatch.setenv("PORTABLE_ENGINE", "naive")
    assert isinstance(get_engine(), NaiveEngine)
    assert get_engine() is get_engine()

    set_engine(None)
    monkeypatch.setenv("PORTABLE_ENGINE", "Threaded")
    eng = get_engine()
    assert isinstance(eng, ThreadedEngine)
    eng.shutdown()

    set_engine(None)
    monkeypatch.delenv("PORTABLE_ENGINE")
    eng = get_engine()
    assert isinstance(eng, ThreadedEngine)  # the default
    eng.shutdown()


@deadline(10)
def test_unknown_engine_name_is_an_error(monkeypatch, fresh_global_engine) -> None:
    set_engine(None)
    monkeypatch.setenv("PORTABLE_ENGINE", "turbo")
    with pytest.raises(EngineError, match="turbo") as info:
        get_engine()
    assert "naive" in str(info.value) and "threaded" in str(info.value)
    with pytest.raises(EngineError, match="accepted values"):
        with use_engine("warp"):
            pass


@deadline(10)
def test_use_engine_installs_and_restores() -> None:
    outer = get_engine()
    with use_engine("naive") as eng:
        assert isinstance(eng, NaiveEngine) and get_engine() is eng
    assert get_engine() is outer

    mine = ThreadedEngine(cpu_workers=1)
    with use_engine(mine):
        assert get_engine() is mine
        v = mine.new_var("v")
        mine.push(lambda: None, writes=[v])
    assert get_engine() is outer
    mine.wait_for_var(v)  # a given engine is not shut down by use_engine
    mine.shutdown()
    with pytest.raises(EngineError):
        set_engine("naive")  # type: ignore[arg-type]


@deadline(15)
def test_worker_count_and_bound_come_from_env(monkeypatch, make_engine) -> None:
    monkeypatch.setenv("PORTABLE_CPU_WORKERS", "3")
    eng = make_engine("threaded")
    x = eng.new_var("x")
    barrier = threading.Barrier(3, timeout=3)  # needs three workers at once
    for i in range(3):
        eng.push(barrier.wait, reads=[x], name=f"reader{i}")
    eng.wait_all()

    monkeypatch.setenv("PORTABLE_CPU_WORKERS", "many")
    with pytest.raises(EngineError, match="PORTABLE_CPU_WORKERS"):
        ThreadedEngine()
    monkeypatch.setenv("PORTABLE_CPU_WORKERS", "1")
    monkeypatch.setenv("PORTABLE_ENGINE_MAX_PENDING", "0")
    with pytest.raises(EngineError, match="PORTABLE_ENGINE_MAX_PENDING"):
        ThreadedEngine()


@deadline(30)
def test_import_starts_no_thread() -> None:
    code = ("import threading, portable.engine as e\n"
            "assert threading.active_count() == 1, threading.enumerate()\n"
            "eng = e.get_engine()\n"
            "assert threading.active_count() == 1, 'engine creation started threads'\n"
            "v = eng.new_var('v'); eng.push(lambda: None, writes=[v]); eng.wait_for_var(v)\n"
            "print(type(eng).__name__)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTABLE_")}
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=25)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ThreadedEngine"
    assert engine_pkg.ENGINES.keys() == {"naive", "threaded"}
