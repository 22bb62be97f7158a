"""The centre's side of Elastic Averaging SGD (EASGD, Zhang et al. 2015, as MXNET-MPI runs it
between allreduce groups): how a parameter server answers a group's elastic exchange.

Every ``tau`` steps a group's leader sends its replica ``x_g`` of a key (part) to the server that
holds the key's centre ``c``. The server answers with the elastic difference

    d_g = alpha * (x_g - c)

and moves the centre by what it hands out, ``c <- c + d_g``; the group then applies
``x_g <- x_g - d_g`` (:mod:`portable.kvstore.easgd`). What leaves the worker is exactly what the
centre gains (the elastic symmetry of EASGD), whatever the timing.

Two modes:

* **asynchronous** (the default): each exchange is answered at once with the centre as it is,
  in the order exchanges arrive: ``c <- c + alpha * (x_g - c)`` per arrival;
* **synchronous** (``sync``): the server holds the exchanges of round ``r`` of a key until every
  one of the ``groups`` groups sent it, then answers all of them from the same centre,
  ``d_g = alpha * (x_g - c)`` and ``c <- c + sum_g d_g`` (summed in group order, so the result
  does not depend on arrival order): EASGD's synchronous equations, deterministic.

Replies go back to each sender in the order it sent its exchanges (a worker posts its receives
in that order, and MPI matches messages of one tag in order), whatever order rounds complete in.

Stages of :meth:`ElasticRounds.offer`: queue the exchange in its sender's reply order; in
asynchronous mode answer it now, in synchronous mode add it to its round and answer the round
once complete; then release, per sender, the replies at the head of its order that are ready.

Example:
    >>> rounds = ElasticRounds(alpha=0.5, groups=1, sync=False)
    >>> centre, replies = rounds.offer(3, "k", 0, 0, np.array([2.0]), lambda: np.array([0.0]))
    >>> centre.tolist(), [(dest, d.tolist()) for dest, d in replies]
    ([1.0], [(3, [1.0])])
"""
from __future__ import annotations

from collections import deque
from typing import Callable

import numpy as np

from portable.errors import PortableError

# parameter-server operations of the exchange (ps.Server dispatches them here)
OP_CONFIG = "elastic_config"   # {"alpha", "groups", "sync"}: answered on TAG_PS_REPLY
OP_EXCHANGE = "elastic"        # {"key", "part", "group", "round"} + the replica's part
OP_ASSIGN = "assign"           # {"key", "part"} + values: overwrite the centre (checkpoints)


class ElasticRounds:
    """The exchanges a server has seen and the replies it owes (pure NumPy, no MPI).

    Args:
        alpha: the elastic coefficient (0 < alpha <= 1).
        groups: how many groups exchange each key (synchronous mode waits for all of them).
        sync: synchronous rounds (see the module docstring).
    """

    def __init__(self, alpha: float, groups: int, sync: bool) -> None:
        alpha = float(alpha)
        if not 0.0 < alpha <= 1.0:
            raise PortableError(f"EASGD: alpha must be in (0, 1], got {alpha!r}")
        if int(groups) < 1:
            raise PortableError(f"EASGD: the number of groups must be positive, got {groups!r}")
        self.alpha, self.groups, self.sync = alpha, int(groups), bool(sync)
        self._rounds: dict[tuple[str, int], dict[int, tuple[int, np.ndarray]]] = {}
        self._order: dict[int, deque] = {}  # sender -> (index, round) in the order it sent
        self._ready: dict[tuple[int, str, int], np.ndarray] = {}
        self._applied: dict[tuple[int, str], int] = {}  # (group, part) -> exchanges in c
        self.exchanges = 0

    def offer(self, source: int, index: str, round_: int, group: int, x: np.ndarray,
              centre: Callable[[], np.ndarray]) -> tuple[np.ndarray | None, list]:
        """Take one exchange.

        Args:
            source: the sender's rank (replies go to it).
            index: the key part's name on the server.
            round_: the sender's exchange number for this key (synchronous rounds).
            group: the sender's group (0 .. groups-1).
            x: the sender's replica of the part.
            centre: returns the current centre of the part (called only when it is needed).

        Returns:
            ``(new centre or None when unchanged, [(destination rank, d), ...])``: the
            replies that may be sent now, in order.
        """
        if not 0 <= group < self.groups:
            raise PortableError(f"EASGD: an exchange of key/part {index} from rank {source} "
                                f"names group {group}, but the servers were told of "
                                f"{self.groups} group(s)")
        self.exchanges += 1
        self._order.setdefault(source, deque()).append((index, round_))
        if not self.sync:
            c = centre()
            d = self.alpha * (x - c)
            self._ready[(source, index, round_)] = d
            self._count(group, index)
            return c + d, self._release(source)
        members = self._rounds.setdefault((index, round_), {})
        if group in members:
            raise PortableError(f"EASGD: group {group} sent round {round_} of key/part {index} "
                                f"twice (ranks {members[group][0]} and {source}); every group "
                                f"has one leader")
        members[group] = (source, x)
        if len(members) < self.groups:
            return None, []
        del self._rounds[(index, round_)]
        c = centre()
        total = np.zeros_like(c)
        senders = []
        for g in sorted(members):  # group order: the sum does not depend on arrival order
            sender, values = members[g]
            d = self.alpha * (values - c)
            total += d
            self._ready[(sender, index, round_)] = d
            self._count(g, index)
            senders.append(sender)
        replies = [reply for sender in senders for reply in self._release(sender)]
        return c + total, replies

    def _count(self, group: int, index: str) -> None:
        self._applied[(group, index)] = self._applied.get((group, index), 0) + 1

    def applied(self, group: int, index: str) -> int:
        """How many of ``group``'s exchanges of key part ``index`` the centre holds: a pull of
        the centre that must see them waits until then (``ps.Server``)."""
        return self._applied.get((group, index), 0)

    def _release(self, source: int) -> list[tuple[int, np.ndarray]]:
        """The replies owed to ``source`` that are ready, in the order it sent."""
        order, out = self._order[source], []
        while order and (source, *order[0]) in self._ready:
            index, round_ = order.popleft()
            out.append((source, self._ready.pop((source, index, round_))))
        return out

    def waiting(self) -> list[tuple[str, int, list[int]]]:
        """Incomplete synchronous rounds: ``(key part, round, groups that sent it)``."""
        return [(index, round_, sorted(members))
                for (index, round_), members in self._rounds.items()]
