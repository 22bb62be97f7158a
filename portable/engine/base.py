"""The dependency-engine contract shared by every engine (MXNet's ``Engine`` interface).

An engine runs zero-argument callables ("ops") in an order that respects the resources they
declare: each op names the variables it reads and the variables it writes. Ops that touch a
variable behave as if they ran one after another in push order; ops with no conflicting
variable may run concurrently. Nothing else orders them, so compute, copies and communication
are sequenced by variables, not by ad-hoc locks.

Error contract (the same for every engine):

* An exception raised by an op's ``fn`` is never raised from ``push``. It is recorded on every
  variable the op writes, and raised as :class:`~portable.errors.EngineError` (naming the op,
  chained to the original exception) by ``wait_for_var`` on any of those variables and, once,
  by the next ``wait_all``.
* An op that reads a variable in error state is skipped and its writes get the same error, so
  a failure surfaces wherever the (missing) data would be read.
* An op that writes a variable without reading it gives it fresh data: the error is cleared.
  An op that updates a variable in place must therefore list it in both ``reads`` and
  ``writes``.

Example:
    >>> from portable.engine import NaiveEngine
    >>> eng = NaiveEngine()
    >>> x = eng.new_var("x")
    >>> box = []
    >>> eng.push(lambda: box.append(1), writes=[x], name="fill")
    >>> eng.wait_for_var(x); box
    [1]
"""
from __future__ import annotations

import itertools
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from portable.errors import EngineError

_var_ids = itertools.count()

# The device of ops started by the thread that makes them ready (the pusher, or whichever
# thread finished the op's last dependency) instead of by a worker: for ops that only hand
# their data to another thread (a communication queue) and would cost more in thread hops
# than in work. Such an ``fn`` must return quickly and never block, except where
# ``Engine.idle_worker()`` says that its thread has nothing else to do.
INLINE = "engine:inline"
# The array code pushes INLINE the small ops that only compute (elementwise ops, reductions,
# fills) whose outputs hold at most this many elements: about where handing the op to a worker
# (some microseconds, and a GIL hand-off) stops costing more than the kernel itself.
INLINE_ELEMENTS = 4096


class Var:
    """An engine variable: a tag for one resource (an array's storage, a parameter, a stream).

    A Var carries no data; it only orders the ops that declare it. Create one with
    :meth:`Engine.new_var`, never directly, so that it belongs to exactly one engine.

    Attributes:
        name: A label used only in diagnostics (errors, :meth:`Engine.pending`).
        id: A process-unique integer, so two vars with the same name can be told apart.

    Example:
        >>> from portable.engine import NaiveEngine
        >>> NaiveEngine().new_var("weight").name
        'weight'
    """

    __slots__ = ("name", "id", "_owner", "_failure", "_deleted")

    def __init__(self, name: str, owner: "Engine") -> None:
        self.name = name
        self.id = next(_var_ids)
        self._owner = owner
        # The failure whose op wrote this var last (None when the data is valid).
        self._failure: OpFailure | None = None
        # Set when delete_var is called: later pushes naming the var are refused.
        self._deleted = False

    def __repr__(self) -> str:
        return f"Var({self.name!r}#{self.id})"


@dataclass(frozen=True)
class PendingOp:
    """A snapshot of one op that has been pushed but has not finished.

    Attributes:
        name: The op's ``name`` given to ``push``.
        waiting_for: The variables whose earlier users the op still waits for, in the order
            the op declared them; empty once the op is ready or running.
        state: ``"waiting"`` (dependencies outstanding), ``"ready"`` (queued on its device)
            or ``"running"``.
        device: The device key given to ``push`` (None: the default CPU queue).
        priority: The priority given to ``push``.
    """

    name: str
    waiting_for: tuple[Var, ...]
    state: str
    device: Hashable = None
    priority: int = 0

    def __str__(self) -> str:
        if self.waiting_for:
            names = ", ".join(repr(v.name or f"#{v.id}") for v in self.waiting_for)
            return f"op {self.name!r} ({self.state}) waits for var {names}"
        return f"op {self.name!r} ({self.state}) on {self.device or 'cpu'}"


class OpFailure:
    """Why a variable holds no valid data: the op that raised, and how the error got here.

    Args:
        op_name: The name of the op whose ``fn`` raised.
        exc: The exception it raised.
        hops: How many skipped dependent ops carried the error to the variable (0: the
            variable was written by the failed op itself).
        via: The name of the last skipped op that passed the error on (None when hops == 0).
    """

    __slots__ = ("op_name", "exc", "hops", "via")

    def __init__(self, op_name: str, exc: BaseException, hops: int = 0,
                 via: str | None = None) -> None:
        self.op_name = op_name
        self.exc = exc
        self.hops = hops
        self.via = via

    def passed_on(self, skipped_op: str) -> "OpFailure":
        """The same failure one skipped op further downstream."""
        return OpFailure(self.op_name, self.exc, self.hops + 1, skipped_op)

    def error(self, var: Var | None = None, others: int = 0) -> EngineError:
        """An EngineError describing this failure (raise it ``from self.exc``).

        Args:
            var: The variable that was waited on, if any.
            others: How many further failures are reported together with this one.
        """
        msg = f"engine op {self.op_name!r} failed: {type(self.exc).__name__}: {self.exc}"
        if var is not None:
            msg += f" (waited on var {var.name!r}"
            if self.hops:
                msg += (f"; the error reached it through {self.hops} skipped dependent op(s),"
                        f" last {self.via!r}")
            msg += ")"
        if others:
            msg += f"; {others} more op(s) failed since the last wait_all"
        return EngineError(msg)


def raise_failure(failure: OpFailure, var: Var | None = None, others: int = 0) -> None:
    """Raise ``failure`` as an EngineError chained to the op's original exception."""
    raise failure.error(var, others) from failure.exc


class Engine(ABC):
    """The dependency engine interface (MXNet's ``Engine``).

    Example:
        >>> from portable.engine import get_engine
        >>> eng = get_engine()
        >>> a, b = eng.new_var("a"), eng.new_var("b")
        >>> data = {"a": 1}
        >>> eng.push(lambda: data.update(b=data["a"] + 1), reads=[a], writes=[b], name="inc")
        >>> eng.wait_for_var(b); data["b"]
        2
    """

    def new_var(self, name: str = "") -> Var:
        """Create a variable owned by this engine.

        Args:
            name: A label for diagnostics.

        Returns:
            The new Var.
        """
        return Var(name, self)

    @abstractmethod
    def push(self, fn: Callable[[], object], reads: Iterable[Var] = (),
             writes: Iterable[Var] = (), device: Hashable = None, priority: int = 0,
             name: str = "op") -> None:
        """Schedule ``fn()`` after every earlier op that conflicts with its variables.

        Args:
            fn: A zero-argument callable; its return value is ignored.
            reads: Variables the op only reads (may be shared with other readers).
            writes: Variables the op writes (exclusive access). A var listed in both is a
                read-modify-write.
            device: An opaque hashable device key (a Device, or a string like "cpu(0)");
                None is the default CPU queue; :data:`INLINE` starts ``fn`` in the thread
                that makes the op ready (it must return quickly and never block).
            priority: Among ops that are ready on the same device, higher runs first.
            name: A label used in errors and :meth:`pending`.

        Raises:
            EngineError: For bad arguments (not callable, foreign or deleted var); never for
                an exception raised by ``fn`` (see the module docstring).
        """

    def push_async(self, fn: Callable[[Callable[..., None]], object], reads: Iterable[Var] = (),
                   writes: Iterable[Var] = (), device: Hashable = None, priority: int = 0,
                   name: str = "op") -> None:
        """Like :meth:`push`, but the op finishes when ``fn`` calls the ``on_complete(error=None)``
        it is given, which may happen later and from any thread (MXNet's ``PushAsync``): a
        communication thread completes ops without a worker blocked on each.

        ``on_complete`` must be called exactly once; an ``error`` (an exception) is recorded like
        one raised by a ``push`` op. This default runs ``fn`` in a pushed op that waits for the
        completion (it holds a worker, or the naive engine's caller, meanwhile).
        """
        def run() -> None:
            done, errors = threading.Event(), []

            def on_complete(error: BaseException | None = None) -> None:
                errors.append(error)
                done.set()
            fn(on_complete)
            done.wait()
            if errors[0] is not None:
                raise errors[0]
        run.__qualname__ = name
        self.push(run, reads, writes, device, priority, name)

    @abstractmethod
    def wait_for_var(self, var: Var) -> None:
        """Block until every op pushed so far that reads or writes ``var`` has finished.

        Raises:
            EngineError: If ``var`` is in error state (its last writer failed), naming the op.
        """

    @abstractmethod
    def wait_all(self) -> None:
        """Block until every pushed op has finished.

        Raises:
            EngineError: If any op failed since the previous ``wait_all`` (each failure is
                reported by one ``wait_all`` only; variables stay in error state).
        """

    @abstractmethod
    def delete_var(self, var: Var) -> None:
        """Free ``var`` once the ops already pushed on it have finished (does not block).

        Raises:
            EngineError: If the var is foreign or already deleted.
        """

    @abstractmethod
    def pending(self) -> list[PendingOp]:
        """Snapshot every pushed op that has not finished, oldest first (to diagnose hangs)."""

    def idle_worker(self) -> bool:
        """Whether the calling thread is one of this engine's workers and no other ready op
        waits for its pool: such a thread may block on outside work (a collective that every
        rank must join) without holding up the engine's. False on any other thread (the
        program's keeps pushing) and on engines without workers."""
        return False

    def shutdown(self, wait: bool = True) -> None:
        """Release the engine's threads, if any. The default engine needs none.

        Args:
            wait: Finish the pushed ops first.
        """

    # -- helpers shared by the implementations -------------------------------------------

    def _check_var(self, var: object) -> Var:
        if not isinstance(var, Var):
            raise EngineError(f"expected an engine Var, got {type(var).__name__}: {var!r}")
        if var._owner is not self:
            raise EngineError(f"{var!r} was created by another engine "
                              f"({type(var._owner).__name__}); vars cannot move between engines")
        return var

    def _normalize(self, fn: object, reads: Iterable[Var], writes: Iterable[Var],
                   name: str) -> tuple[tuple[Var, ...], tuple[Var, ...], tuple[Var, ...]]:
        """Validate push arguments. This runs on every imperative op: the common case (a var
        or two each, all ours, no repeats) takes one pass per list, without a set.

        Returns:
            ``(reads, dep_reads, writes)``: the declared reads (deduplicated, used to decide
            whether the op inherits an upstream failure), the reads that are not also writes
            (the read dependencies: a write dependency already grants exclusive access), and
            the deduplicated writes. Each keeps declaration order.
        """
        if not callable(fn):
            raise EngineError(f"push of op {name!r}: fn must be a zero-argument callable, "
                              f"got {type(fn).__name__}")
        reads_t, writes_t = tuple(reads), tuple(writes)
        for v in writes_t:
            if not isinstance(v, Var) or v._owner is not self:
                self._check_var(v)  # raises, naming the var and why
        for v in reads_t:
            if not isinstance(v, Var) or v._owner is not self:
                self._check_var(v)
        if len(reads_t) > 1 and (len(reads_t) > 2 or reads_t[0] is reads_t[1]):
            reads_t = _unique(reads_t)  # (x + x reads one var twice)
        if not writes_t or not reads_t:
            return reads_t, reads_t, writes_t
        if len(writes_t) == 1:  # (an op with one output: one membership test)
            written = writes_t[0]
            if written not in reads_t:
                return reads_t, reads_t, writes_t
            return reads_t, tuple([v for v in reads_t if v is not written]), writes_t
        writes_t = _unique(writes_t)
        written = set(writes_t)
        return reads_t, tuple([v for v in reads_t if v not in written]), writes_t

    @staticmethod
    def _refuse_deleted(vars_: Iterable[Var], name: str) -> None:
        for v in vars_:
            if v._deleted:
                raise EngineError(f"push of op {name!r}: {v!r} was deleted with delete_var")


def _unique(vars_: tuple[Var, ...]) -> tuple[Var, ...]:
    """``vars_`` without repeats, in order."""
    if len(vars_) == 2:
        return vars_ if vars_[0] is not vars_[1] else vars_[:1]
    if len(set(vars_)) < len(vars_):
        return tuple(dict.fromkeys(vars_))
    return vars_
