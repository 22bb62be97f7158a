"""``dist_sync_hierarchical``: two-level allreduce (within a machine, then across machines).

Each bucket is first summed inside a node (``Reduce`` to the node's first rank over a
communicator of the ranks sharing memory, ``MPI.COMM_TYPE_SHARED``), then across the node
leaders (one ``Allreduce``, compressed if compression is on: the slow links carry the fewest
bytes), then sent back inside each node (``Bcast``). The negotiation, fusion and priorities are
those of ``dist_sync``: only the reducer differs, so results equal the flat store's up to the
order of float additions.

``PORTABLE_KV_NODE_SIZE=k`` groups ranks ``k`` at a time into pretend nodes instead, which lets
one machine exercise both levels.

Example (under ``portable launch -n 4 -- python script.py``):
    >>> kv = pt.kv.create("dist_sync_hierarchical")   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.kvstore.comm import env_int, import_mpi
from portable.kvstore.dist_sync import DistSyncKVStore
from portable.kvstore.reducers import DONE, FlatReducer, Piece
from portable.kvstore.traffic import Traffic


class TwoLevelReducer:
    """Reduce inside each node, allreduce across node leaders, broadcast inside each node.

    Args:
        comm: the workers' communicator (used only by the store's background thread).
        compressor: gradient compressor for the leaders' step (None: plain sums).
        ranks_per_node: group ranks into pretend nodes of this size (None: shared memory).
    """

    def __init__(self, comm: Any, compressor: Any = None,
                 ranks_per_node: int | None = None) -> None:
        MPI = self.MPI = import_mpi()
        self.comm = comm
        rank = comm.Get_rank()
        if ranks_per_node:
            self.node = comm.Split(rank // ranks_per_node, rank)
        else:
            self.node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        self.is_leader = self.node.Get_rank() == 0
        leaders = comm.Split(0 if self.is_leader else MPI.UNDEFINED, rank)
        self.traffic = Traffic()  # (the leaders' step counts into it too)
        self.cross = FlatReducer(leaders, compressor, self.traffic) if self.is_leader else None
        self._compressor = compressor

    @property
    def compressor(self) -> Any:
        return self._compressor

    @compressor.setter
    def compressor(self, value: Any) -> None:
        self._compressor = value
        if self.cross is not None:
            self.cross.compressor = value

    def allreduce(self, buffer: np.ndarray, pieces: list[Piece]) -> None:
        MPI = self.MPI
        if self.is_leader:
            self.node.Reduce(MPI.IN_PLACE, buffer, op=MPI.SUM, root=0)
            self.cross.allreduce(buffer, pieces)
        else:
            self.node.Reduce(buffer, None, op=MPI.SUM, root=0)
        self.node.Bcast(buffer, root=0)
        if self.node.Get_size() > 1:  # reduce in, broadcast out: B each way per rank
            self.traffic.add(buffer.nbytes, buffer.nbytes)

    def start(self, buffer: np.ndarray, pieces: list[Piece]) -> Any:
        """Sum ``buffer`` at once (blocking calls; see :mod:`portable.kvstore.runs`): with a
        node's ``Ireduce`` in flight per bucket and its later steps called as each bucket
        landed, 16 emulated ranks in nodes of 4 were slower (``benchmarks/scaling_sim.py``:
        280 against 260 ms a step), as the hand-written blocking loop beside it is the
        fastest there."""
        self.allreduce(buffer, pieces)
        return DONE

    def broadcast(self, buffer: np.ndarray, root: int) -> None:
        self.comm.Bcast(buffer, root=root)
        root_here = self.comm.Get_rank() == root
        self.traffic.add(buffer.nbytes if root_here else 0, 0 if root_here else buffer.nbytes)


class HierarchicalKVStore(DistSyncKVStore):
    """``dist_sync`` with the two-level reducer (see the module docstring).

    Args:
        name: the store type.
        ranks_per_node: pretend node size (default ``PORTABLE_KV_NODE_SIZE``; unset: the ranks
            that share memory form a node).
        **kwargs: as :class:`DistSyncKVStore`.
    """

    def __init__(self, name: str = "dist_sync_hierarchical", ranks_per_node: int | None = None,
                 **kwargs: Any) -> None:
        self._ranks_per_node = ranks_per_node or env_int("PORTABLE_KV_NODE_SIZE", 0) or None
        super().__init__(name, **kwargs)

    def _make_reducer(self, comm: Any) -> Any:
        return TwoLevelReducer(comm, None, self._ranks_per_node)
