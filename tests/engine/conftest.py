"""Engine test fixtures: engines made by a test are shut down when it ends, even if it failed."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from portable.engine import Engine, NaiveEngine, ThreadedEngine


@pytest.fixture
def make_engine() -> Iterator[Callable[..., Engine]]:
    """``make_engine("naive")`` or ``make_engine("threaded", cpu_workers=2, max_pending=8)``."""
    made: list[Engine] = []

    def make(kind: str = "threaded", **options: int) -> Engine:
        engine = NaiveEngine() if kind == "naive" else ThreadedEngine(**options)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.shutdown(wait=False)  # a failed test may leave ops blocked: do not join
