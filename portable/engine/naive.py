"""NaiveEngine: every op runs synchronously inside ``push`` (for debugging).

Because ops run at push time, push order is execution order and a stack trace taken inside an
op shows who pushed it. Errors still follow the engine contract (see ``portable.engine.base``):
they are recorded on the written variables and raised at the next wait, never from ``push``,
so code behaves the same under both engines.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable

from portable.engine.base import Engine, OpFailure, PendingOp, Var, raise_failure
from portable.errors import EngineError

_SEQUENCES = (list, tuple)  # reads and writes that push iterates as they are


class NaiveEngine(Engine):
    """Runs each pushed op immediately in the pushing thread.

    Pushes from several threads are serialized by one re-entrant lock (re-entrant so that an
    op may push further ops, which then run nested, before the outer op returns).

    Example:
        >>> eng = NaiveEngine()
        >>> v = eng.new_var("v")
        >>> eng.push(lambda: 1 / 0, writes=[v], name="divide")   # does not raise here
        >>> try:
        ...     eng.wait_for_var(v)
        ... except Exception as err:
        ...     print(type(err).__name__)
        EngineError
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._failures: list[OpFailure] = []

    def push(self, fn: Callable[[], object], reads: Iterable[Var] = (),
             writes: Iterable[Var] = (), device: Hashable = None, priority: int = 0,
             name: str = "op") -> None:
        """Run ``fn()`` now; see :meth:`Engine.push`. ``device`` and ``priority`` are ignored."""
        if not callable(fn):
            self._normalize(fn, reads, writes, name)  # raises, naming the op
        # One pass per list, under the lock, checks and reads each var: repeats need no removal
        # here (nothing is queued), and this runs on every imperative op, so the lists the array
        # code passes are used as they are and a var of ours is told by its class first.
        if reads.__class__ not in _SEQUENCES:
            reads = tuple(reads)
        if writes.__class__ not in _SEQUENCES:
            writes = tuple(writes)
        lock = self._lock
        lock.acquire()  # (not ``with``: half the cost, on every op; try/finally costs nothing)
        try:
            failure = None
            for v in reads:
                if v.__class__ is not Var or v._owner is not self:
                    self._check_var(v)  # raises, naming the var and why (unless it is ours)
                if v._deleted:
                    self._refuse_deleted(reads, name)
                if failure is None:
                    failure = v._failure
            for v in writes:
                if v.__class__ is not Var or v._owner is not self:
                    self._check_var(v)
                if v._deleted:
                    self._refuse_deleted(writes, name)
            if failure is not None:
                failure = failure.passed_on(name)  # skip: its inputs hold no valid data
            else:
                try:
                    fn()
                except BaseException as exc:  # noqa: BLE001 - the contract defers every error
                    failure = OpFailure(name, exc)
                    self._failures.append(failure)
            for v in writes:
                v._failure = failure
        finally:
            lock.release()

    def wait_for_var(self, var: Var) -> None:
        """Return at once (all ops already ran), raising the var's failure if it has one."""
        self._check_var(var)
        if var._deleted:
            raise EngineError(f"wait_for_var: {var!r} was deleted")
        failure = var._failure
        if failure is not None:
            raise_failure(failure, var)

    def wait_all(self) -> None:
        """Raise the first failure since the previous ``wait_all``, if any."""
        with self._lock:
            failures, self._failures = self._failures, []
        if failures:
            raise_failure(failures[0], others=len(failures) - 1)

    def delete_var(self, var: Var) -> None:
        """Forget ``var``; later pushes naming it raise EngineError."""
        self._check_var(var)
        with self._lock:
            if var._deleted:
                raise EngineError(f"delete_var: {var!r} was already deleted")
            var._deleted = True
            var._failure = None

    def pending(self) -> list[PendingOp]:
        """Always empty: nothing outlives its ``push``."""
        return []
