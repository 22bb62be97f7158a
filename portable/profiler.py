"""A profiler with MXNet 1.x's interface (``mx.profiler``): ``set_config``, ``set_state``,
``pause``/``resume``, ``dump`` (a Chrome trace JSON file, open it in chrome://tracing or
Perfetto) and ``dumps`` (a table of per-op aggregate times), plus user ``Domain``/``Task``/
``Frame``/``Event``/``Counter``/``Marker`` objects that record into the same trace.

Ops are timed where their kernels run: imperative ops as the engine runs them, and each step of
a compiled plan (a hybridized block, an executor). The kernel call sites ask ``op_started()``,
which costs one global read while the profiler is stopped.

Example:
    >>> import portable as mx
    >>> mx.profiler.set_config(aggregate_stats=True, filename="/tmp/profile.json")
    >>> mx.profiler.set_state("run")
    >>> y = (mx.nd.ones((2, 2)) * 3).asnumpy()
    >>> mx.profiler.set_state("stop")
    >>> "Mul" in mx.profiler.dumps()
    True
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from portable.errors import PortableError

_CONFIG_KEYS = {"profile_all", "profile_symbolic", "profile_imperative", "profile_memory",
                "profile_api", "filename", "continuous_dump", "dump_period", "aggregate_stats",
                "profile_process", "gpu_memory_profile_filename_prefix"}
_config: dict[str, Any] = {"filename": "profile.json", "aggregate_stats": False,
                           "profile_symbolic": True, "profile_imperative": True,
                           "profile_api": False, "profile_memory": False}
_lock = threading.Lock()
_events: list[dict] = []
_stats: dict[str, dict[str, list[float]]] = {}  # category -> name -> [count, total, min, max]
_running = False
_paused = False
_EPOCH = time.perf_counter_ns()


def set_config(**kwargs: Any) -> None:
    """Set profiler options (MXNet's keys: ``profile_all``, ``profile_symbolic``,
    ``profile_imperative``, ``profile_memory``, ``profile_api``, ``filename``,
    ``aggregate_stats``, ``continuous_dump``, ``dump_period``).

    Raises:
        PortableError: an unknown key.
    """
    unknown = set(kwargs) - _CONFIG_KEYS
    if unknown:
        raise PortableError(f"profiler.set_config: unknown option(s) {sorted(unknown)}; known: "
                            f"{sorted(_CONFIG_KEYS)}")
    _config.update(kwargs)
    if kwargs.get("profile_all"):
        _config.update(profile_symbolic=True, profile_imperative=True, profile_api=True,
                       profile_memory=True)


def set_state(state: str = "stop", profile_process: str = "worker") -> None:
    """``'run'`` starts recording, ``'stop'`` ends it."""
    global _running
    if state not in ("run", "stop"):
        raise PortableError(f"profiler.set_state: state must be 'run' or 'stop', got {state!r}")
    _running = state == "run"


def start(profile_process: str = "worker") -> None:
    """``set_state('run')``."""
    set_state("run", profile_process)


def stop(profile_process: str = "worker") -> None:
    """``set_state('stop')``."""
    set_state("stop", profile_process)


def pause(profile_process: str = "worker") -> None:
    """Stop recording until ``resume`` (the state stays ``run``)."""
    global _paused
    _paused = True


def resume(profile_process: str = "worker") -> None:
    global _paused
    _paused = False


def _now_us() -> float:
    return (time.perf_counter_ns() - _EPOCH) / 1000.0


def op_started() -> int:
    """For kernel call sites: a start time in ns when ops are being recorded, else 0."""
    if not _running or _paused:
        return 0
    return time.perf_counter_ns()


def op_finished(name: str, started: int, category: str = "operator") -> None:
    """Record an op that ran from ``started`` (``op_started()``'s value) until now."""
    end = time.perf_counter_ns()
    record(name, (started - _EPOCH) / 1000.0, (end - started) / 1000.0, category)


def record(name: str, start_us: float, duration_us: float, category: str) -> None:
    """Add one complete event (Chrome trace ``ph: X``) and its aggregate statistics."""
    event = {"name": name, "cat": category, "ph": "X", "ts": start_us, "dur": duration_us,
             "pid": os.getpid(), "tid": threading.get_ident()}
    with _lock:
        _events.append(event)
        entry = _stats.setdefault(category, {}).setdefault(name, [0, 0.0, float("inf"), 0.0])
        entry[0] += 1
        entry[1] += duration_us
        entry[2] = min(entry[2], duration_us)
        entry[3] = max(entry[3], duration_us)


def _instant(name: str, category: str, phase: str, **extra: Any) -> None:
    if not _running or _paused:
        return
    event = {"name": name, "cat": category, "ph": phase, "ts": _now_us(), "pid": os.getpid(),
             "tid": threading.get_ident(), **extra}
    with _lock:
        _events.append(event)


def dump(finished: bool = True, profile_process: str = "worker") -> None:
    """Write the recorded events to ``filename`` as Chrome trace JSON (atomically).

    Args:
        finished: also forget the events written (as MXNet, which closes the file).
    """
    path = _config["filename"]
    with _lock:
        document = {"traceEvents": list(_events), "displayTimeUnit": "ms"}
        if finished:
            _events.clear()
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
    os.replace(temporary, path)


def dumps(reset: bool = False, format: str = "table", sort_by: str = "total",  # noqa: A002
          ascending: bool = False) -> str:
    """The aggregate statistics: per category, each op's count and total/min/max/avg time.

    Args:
        reset: forget the statistics afterwards.
        format: ``table`` or ``json``.
        sort_by: ``total``, ``avg``, ``min``, ``max`` or ``count``.
        ascending: sort order.
    """
    keys = {"count": lambda s: s[0], "total": lambda s: s[1], "min": lambda s: s[2],
            "max": lambda s: s[3], "avg": lambda s: s[1] / s[0]}
    if format not in ("table", "json") or sort_by not in keys:
        raise PortableError(f"profiler.dumps: format must be 'table' or 'json' and sort_by one "
                            f"of {sorted(keys)}; got {format!r}, {sort_by!r}")
    with _lock:
        stats = {c: {n: list(s) for n, s in ops.items()} for c, ops in _stats.items()}
        if reset:
            _stats.clear()
    if format == "json":
        return json.dumps({c: {n: {"count": s[0], "total": s[1] / 1000, "min": s[2] / 1000,
                                   "max": s[3] / 1000, "avg": s[1] / s[0] / 1000}
                               for n, s in ops.items()} for c, ops in stats.items()})
    lines = ["", "Profile Statistics:", "\tNote the difference in units for different entries."]
    header = (f"{'Name':<30}{'Total Count':>11}    {'Time (ms)':>13}    {'Min Time (ms)':>13}"
              f"    {'Max Time (ms)':>13}    {'Avg Time (ms)':>13}")
    for category, ops in sorted(stats.items()):
        lines += [category, "=" * 17, header,
                  f"{'----':<30}{'-' * 11:>11}    {'-' * 9:>13}    {'-' * 13:>13}    "
                  f"{'-' * 13:>13}    {'-' * 13:>13}"]
        ordered = sorted(ops.items(), key=lambda kv: keys[sort_by](kv[1]),
                         reverse=not ascending)
        for name, (count, total, low, high) in ordered:
            lines.append(f"{name[:29]:<30}{count:>11}    {total / 1000:>13.4f}    "
                         f"{low / 1000:>13.4f}    {high / 1000:>13.4f}    "
                         f"{total / count / 1000:>13.4f}")
        lines.append("")
    return "\n".join(lines)


class Domain:
    """A named group of user events (``Task``, ``Frame``, ``Counter``, ``Marker``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name

    def new_task(self, name: str) -> "Task":
        return Task(self, name)

    def new_frame(self, name: str) -> "Frame":
        return Frame(self, name)

    def new_counter(self, name: str, value: int | None = None) -> "Counter":
        return Counter(self, name, value)

    def new_marker(self, name: str) -> "Marker":
        return Marker(self, name)


class _Span:
    """A user time range: ``start()`` ... ``stop()`` records one complete event."""

    category = "user"

    def __init__(self, domain: Domain | None, name: str) -> None:
        self.domain, self.name = domain, name
        self._started = 0

    def start(self) -> None:
        self._started = op_started()

    def stop(self) -> None:
        if self._started:
            category = self.domain.name if self.domain is not None else self.category
            op_finished(self.name, self._started, category)
            self._started = 0

    def __enter__(self) -> "_Span":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __str__(self) -> str:
        return self.name


class Task(_Span):
    """A task of a domain (a time range)."""


class Frame(_Span):
    """A frame of a domain (a time range, e.g. one iteration)."""


class Event(_Span):
    """A time range outside any domain."""

    def __init__(self, name: str) -> None:
        super().__init__(None, name)


class Counter:
    """A named value over time (Chrome trace counter events)."""

    def __init__(self, domain: Domain, name: str, value: int | None = None) -> None:
        self.domain, self.name = domain, name
        self.value = 0
        if value is not None:
            self.set_value(value)

    def set_value(self, value: int) -> None:
        self.value = value
        _instant(self.name, self.domain.name, "C", args={self.name: value})

    def increment(self, delta: int = 1) -> None:
        self.set_value(self.value + delta)

    def decrement(self, delta: int = 1) -> None:
        self.set_value(self.value - delta)

    def __iadd__(self, delta: int) -> "Counter":
        self.increment(delta)
        return self

    def __isub__(self, delta: int) -> "Counter":
        self.decrement(delta)
        return self

    def __str__(self) -> str:
        return self.name


class Marker:
    """An instant event of a domain."""

    def __init__(self, domain: Domain, name: str) -> None:
        self.domain, self.name = domain, name

    def mark(self, scope: str = "process") -> None:
        """Record the instant (``scope``: ``global``, ``process``, ``thread``)."""
        scopes = {"global": "g", "process": "p", "thread": "t", "task": "t", "marker": "p"}
        _instant(self.name, self.domain.name, "i", s=scopes.get(scope, "p"))


__all__ = ["Counter", "Domain", "Event", "Frame", "Marker", "Task", "dump", "dumps", "pause",
           "resume", "set_config", "set_state", "start", "stop"]
