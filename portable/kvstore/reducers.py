"""How one bucket is summed over a communicator: the reducers the collective queue calls.

``FlatReducer`` makes one collective per bucket: an ``Allreduce``, or with a gradient compressor
(:mod:`portable.kvstore.compression`) an ``Allgather`` of every rank's payload followed by a
local decode-and-sum in rank order, so that every rank computes the same sum. The two-level
reducer of the hierarchical store (:mod:`portable.kvstore.hierarchical`) uses it across nodes.

A reducer's ``start`` begins a bucket's sum and returns what to ``Wait()`` on: a non-blocking
collective (``Iallreduce``), so that the collective queue keeps several buckets in flight at
once (:mod:`portable.kvstore.runs`), or :data:`DONE` where the sum is made at once (the
compressed path).

Example (under mpiexec):
    >>> FlatReducer(comm).allreduce(buffer, pieces=[])   # doctest: +SKIP
    >>> FlatReducer(comm).start(buffer, pieces=[]).Wait()   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from portable.kvstore.comm import import_mpi
from portable.kvstore.traffic import Traffic


class Piece(NamedTuple):
    """One tensor's elements in a bucket, as a compressor needs them: its error-feedback
    residual is kept per tensor, so it must know which tensor and which elements."""

    residual_key: Any  # the tensor's residual; None: a rank standing in with zeros keeps none
    total: int         # elements of the whole tensor (the residual's size)
    start: int         # first element of the tensor in the bucket
    offset: int        # where those elements lie in the bucket
    size: int          # how many there are


class _Done:
    """A sum that was finished when it was started (the ``Wait()`` of a blocking path)."""

    def Wait(self) -> None:  # noqa: N802 - the name of MPI's request method
        return None


DONE = _Done()


class FlatReducer:
    """Reduce a bucket with one collective over ``comm`` (``Allreduce``, or with a compressor an
    ``Allgather`` of the payloads followed by a local decode-and-sum).

    Args:
        comm: the communicator.
        compressor: a gradient compressor (None: plain sums).
        traffic: counts the bytes moved (:mod:`portable.kvstore.traffic`; default: its own).
    """

    def __init__(self, comm: Any, compressor: Any = None, traffic: Traffic | None = None) -> None:
        self.comm = comm
        self.compressor = compressor
        self.traffic = traffic if traffic is not None else Traffic()
        self.MPI = import_mpi()

    def allreduce(self, buffer: np.ndarray, pieces: list[Piece]) -> None:
        """Sum ``buffer`` over the ranks, in place.

        Args:
            buffer: the packed (or in-place) data of one bucket.
            pieces: the bucket's pieces; only a compressor needs them (empty without one).
        """
        if self.compressor is not None and buffer.dtype == np.float32:
            sent, received = compressed_allreduce(self.comm, self.compressor, buffer, pieces)
            self.traffic.add(sent, received)
        else:
            self.comm.Allreduce(self.MPI.IN_PLACE, buffer, op=self.MPI.SUM)
            self.traffic.add(buffer.nbytes, buffer.nbytes)

    def start(self, buffer: np.ndarray, pieces: list[Piece]) -> Any:
        """Begin summing ``buffer`` over the ranks, in place; ``Wait()`` on the result before
        reading or reusing it (every rank starts the same buckets in the same order)."""
        if self.compressor is not None and buffer.dtype == np.float32:
            self.allreduce(buffer, pieces)
            return DONE
        self.traffic.add(buffer.nbytes, buffer.nbytes)
        return self.comm.Iallreduce(self.MPI.IN_PLACE, buffer, op=self.MPI.SUM)

    def broadcast(self, buffer: np.ndarray, root: int) -> None:
        self.comm.Bcast(buffer, root=root)
        root_here = self.comm.Get_rank() == root
        self.traffic.add(buffer.nbytes if root_here else 0, 0 if root_here else buffer.nbytes)


def compressed_allreduce(comm: Any, compressor: Any, buffer: np.ndarray,
                         pieces: list[Piece]) -> tuple[int, int]:
    """Allgather every rank's compressed payload and sum the decoded values in rank order.

    Returns:
        The bytes sent and received (this rank's payload; every rank's).
    """
    sizes = [compressor.payload_nbytes(piece.size) for piece in pieces]
    total = sum(sizes)
    send = np.empty(total, np.uint8)
    at = 0
    for piece, nbytes in zip(pieces, sizes):
        compressor.encode(buffer[piece.offset:piece.offset + piece.size], send[at:at + nbytes],
                          piece.residual_key, piece.total, piece.start)
        at += nbytes
    gathered = np.empty(comm.Get_size() * total, np.uint8)
    comm.Allgather(send, gathered)
    buffer[:] = 0
    for rank in range(comm.Get_size()):
        at = rank * total
        for piece, nbytes in zip(pieces, sizes):
            compressor.decode_add(gathered[at:at + nbytes],
                                  buffer[piece.offset:piece.offset + piece.size])
            at += nbytes
    return send.nbytes, gathered.nbytes
