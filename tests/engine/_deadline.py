"""A pytest-free per-test time limit: the test body runs in a daemon thread joined with a timeout.

pytest-timeout is not a dependency, and ``signal.alarm`` cannot interrupt a thread blocked in a
C-level wait, so a hung engine test fails here with a clear message instead of hanging the run.
"""
from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable

import pytest


def deadline(seconds: float) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Fail the decorated test if it runs longer than ``seconds`` (fixtures pass through)."""
    def wrap(test: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(test)
        def run(*args: object, **kwargs: object) -> None:
            outcome: dict[str, BaseException] = {}

            def body() -> None:
                try:
                    test(*args, **kwargs)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
                    outcome["exc"] = exc

            thread = threading.Thread(target=body, daemon=True, name=f"test:{test.__name__}")
            thread.start()
            thread.join(seconds)
            if thread.is_alive():
                pytest.fail(f"{test.__name__} did not finish within {seconds} s (engine hang?)")
            if "exc" in outcome:
                raise outcome["exc"]
        return run
    return wrap


def wait_until(predicate: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Poll ``predicate`` (test-side only) until true or ``seconds`` pass; return its value."""
    end = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True
