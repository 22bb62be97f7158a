"""How many bytes a store moved: what a benchmark compares ``dist_sync``, ``dist_async``, local
SGD and EASGD by.

A ``Traffic`` counts the payload this rank handed to MPI as send buffers (``sent``) and got back
in receive buffers (``received``): an ``Allreduce`` of B bytes counts B each way, a broadcast B
sent at the root and B received elsewhere, an ``Allgather`` its own part sent and every part
received, a point-to-point message its header and data. That is what the algorithm asks the
network for; the MPI library's own algorithm may move up to about twice as much on the wire
(a ring allreduce sends ``2 (n - 1) / n`` B per rank). The few bytes of control traffic
(negotiation vectors, watchdog queries, barriers) are not counted.

Counters only grow; read them before and after the steps you compare.

Example:
    >>> t = Traffic(); t.add(sent=8, received=8); t.add(received=4)
    >>> t.snapshot()
    {'sent': 8, 'received': 12, 'messages': 2}
"""
from __future__ import annotations

import threading


class Traffic:
    """Bytes sent and received by one store on this rank (several threads add to it)."""

    __slots__ = ("sent", "received", "messages", "_lock")

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0
        self.messages = 0  # calls that moved data
        self._lock = threading.Lock()

    def add(self, sent: int = 0, received: int = 0) -> None:
        """Count one call that sent and/or received these many bytes."""
        with self._lock:  # (+= is not atomic across threads)
            self.sent += int(sent)
            self.received += int(received)
            self.messages += 1

    def snapshot(self) -> dict:
        """``{"sent": bytes, "received": bytes, "messages": calls}`` so far."""
        with self._lock:
            return {"sent": self.sent, "received": self.received, "messages": self.messages}
