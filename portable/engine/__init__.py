"""The dependency engine: every piece of work is a pushed op ordered by the vars it declares.

``get_engine()`` returns the process-wide engine, created on first use from the environment
variable ``PORTABLE_ENGINE`` (``threaded``, the default, or ``naive`` to run every op at push time
for debugging). Importing this package starts no thread; the threaded engine starts its workers
on the first op.

Example:
    >>> from portable.engine import use_engine
    >>> with use_engine("naive") as eng:
    ...     v = eng.new_var("v")
    ...     eng.push(lambda: None, writes=[v], name="noop")
    ...     eng.wait_for_var(v)
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from portable.engine.base import INLINE, Engine, PendingOp, Var
from portable.engine.naive import NaiveEngine
from portable.engine.threaded import ThreadedEngine
from portable.errors import EngineError

__all__ = ["INLINE", "Engine", "NaiveEngine", "PendingOp", "ThreadedEngine", "Var", "get_engine",
           "set_engine", "thread_engine", "use_engine"]

ENGINES: dict[str, type[Engine]] = {"threaded": ThreadedEngine, "naive": NaiveEngine}

_engine: Engine | None = None
_engine_lock = threading.Lock()
class _ThreadEngine(threading.local):
    """A thread's own engine while code that an engine op calls back runs on it (a custom
    operator's forward, which may wait on arrays: waiting inside an op of the process-wide
    engine could not end)."""

    engine = None  # a class default: reading it never raises inside getattr


_thread = _ThreadEngine()


def _create(name: str) -> Engine:
    key = name.strip().lower() or "threaded"
    cls = ENGINES.get(key)
    if cls is None:
        raise EngineError(f"unknown engine {name!r} (from PORTABLE_ENGINE or use_engine); "
                          f"accepted values: {', '.join(ENGINES)}")
    return cls()


def get_engine() -> Engine:
    """The process-wide engine, created on first use from ``PORTABLE_ENGINE``.

    Returns:
        The current engine.

    Raises:
        EngineError: If ``PORTABLE_ENGINE`` names no known engine.

    Example:
        >>> get_engine() is get_engine()
        True
    """
    engine = _thread.engine or _engine
    if engine is None:
        with _engine_lock:
            engine = _engine
            if engine is None:
                engine = _create(os.environ.get("PORTABLE_ENGINE", "threaded"))
                _set(engine)
    return engine


def _set(engine: Engine | None) -> Engine | None:
    global _engine
    previous, _engine = _engine, engine
    return previous


def set_engine(engine: Engine | None) -> Engine | None:
    """Install ``engine`` as the process-wide engine (None: recreate from the env on next use).

    The previous engine is not shut down; that is the caller's choice.

    Args:
        engine: The engine to install, or None.

    Returns:
        The previously installed engine (None if none was created yet).

    Example:
        >>> old = set_engine(NaiveEngine())
        >>> _ = set_engine(old)
    """
    if engine is not None and not isinstance(engine, Engine):
        raise EngineError(f"set_engine expects an Engine or None, got {type(engine).__name__}")
    with _engine_lock:
        return _set(engine)


@contextmanager
def thread_engine(engine: Engine) -> Iterator[Engine]:
    """Make ``engine`` the calling thread's engine for the block (other threads keep theirs).

    Example:
        >>> with thread_engine(NaiveEngine()) as eng:
        ...     get_engine() is eng
        True
    """
    previous = _thread.engine
    _thread.engine = engine
    try:
        yield engine
    finally:
        _thread.engine = previous


@contextmanager
def use_engine(name_or_engine: str | Engine) -> Iterator[Engine]:
    """Temporarily install an engine (given, or created by name: ``"naive"``, ``"threaded"``).

    An engine created here is shut down on exit (after its ops finished, unless the block
    raised); a given engine is left running.

    Args:
        name_or_engine: An engine name or an Engine instance.

    Returns:
        A context manager yielding the installed engine.

    Example:
        >>> with use_engine("naive") as eng:
        ...     isinstance(get_engine(), NaiveEngine)
        True
    """
    created = isinstance(name_or_engine, str)
    engine = _create(name_or_engine) if created else name_or_engine
    previous = set_engine(engine)
    ok = False
    try:
        yield engine
        ok = True
    finally:
        set_engine(previous)
        if created:
            engine.shutdown(wait=ok)
