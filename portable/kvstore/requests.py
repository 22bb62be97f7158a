"""One collective request of the store's queue, and the helpers that finish it.

A ``Request`` is one key's allreduce or broadcast: its slot, its host data once ready (with
where that data lies in its owning buffer, so that neighbours lying back to back can travel
as one range), and the completion of its engine op. The requests of one engine op share a
``Countdown`` that completes the op when the last of them is reduced.

Example:
    >>> done = []
    >>> countdown = Countdown(2, lambda: done.append(True))
    >>> countdown(); countdown(); done
    [True]
"""
from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np

from portable.kvstore.slots import Slot


class Span(NamedTuple):
    """Where a request's host data lie in the buffer that owns their memory (byte addresses)."""

    root: np.ndarray  # the owning buffer
    start: int        # address of the first byte
    stop: int         # address one past the last byte


class Request:
    """One key's allreduce or broadcast, from its push until its engine op completes.

    Args:
        slot: the key's slot for this kind of request.
        key: the store's key (op names, status reports).
        priority: the push's priority (higher goes first).
    """

    __slots__ = ("slot", "key", "priority", "host", "ready_at", "error", "then", "span")

    def __init__(self, slot: Slot, key: Any, priority: int) -> None:
        self.slot = slot
        self.key = key
        self.priority = priority
        self.host: np.ndarray | None = None  # flat host view of the data, set when ready
        self.ready_at: float | None = None
        self.error: BaseException | None = None
        self.then: Any = None  # completes the engine op (set when the data is ready)
        self.span: Span | None = None  # None: the data have no host buffer of their own


class Countdown:
    """Calls ``then`` once it was called ``count`` times (the requests of one engine op each
    count down once, from the background thread)."""

    __slots__ = ("count", "then")

    def __init__(self, count: int, then: Any) -> None:
        self.count = count
        self.then = then

    def __call__(self) -> None:
        self.count -= 1
        if self.count == 0:
            self.then()


def span_of(host: np.ndarray) -> Span | None:
    """Where ``host`` lies in the buffer that owns its memory: requests of neighbouring keys
    whose spans touch can be reduced as one range, with no packing copy."""
    root = host
    while isinstance(root.base, np.ndarray):
        root = root.base
    if not root.flags.c_contiguous:
        return None
    start = host.__array_interface__["data"][0]
    return Span(root, start, start + host.nbytes)


def joined_view(first: np.ndarray, span: Span, numel: int) -> np.ndarray:
    """``numel`` elements of ``first``'s owning buffer, from ``first`` on."""
    offset = span.start - span.root.__array_interface__["data"][0]
    return span.root.reshape(-1).view(np.uint8)[offset:offset + numel * first.itemsize].view(
        first.dtype)


def finish(requests: list[Request], cond: threading.Condition,
            error: BaseException | None = None) -> None:
    """Record the requests' outcome and complete their engine ops (outside ``cond``: a
    completion may start the next op on the array, which takes ``cond``)."""
    thens = []
    with cond:
        for request in requests:
            request.error = error if error is not None else request.error
            thens.append(request.then)
            request.then = None  # (it refers back to the requests: free them without the gc)
    for then in thens:
        if then is not None:
            then()


def completing(step: Any, on_complete: Any) -> None:
    """Run ``step`` then complete an asynchronous engine op with its outcome."""
    try:
        step()
    except BaseException as exc:  # noqa: BLE001 - handed to the engine's error contract
        on_complete(exc)
        return
    on_complete()
