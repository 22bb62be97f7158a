"""The negotiation board (kept up to date request by request) against the definition of the
vector: a walk over every slot's queue, written out here as the module docstring states it."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from portable.kvstore.negotiation import HEADER, PHANTOM, Board, priority_code, read
from portable.kvstore.requests import Request, span_of
from portable.kvstore.slots import ALLREDUCE, BROADCAST, KINDS, Slot


def reference_vector(keys: int, pending: dict, joined: bool, real: bool, registered: int,
                     is_root: bool, joinable: bool) -> np.ndarray:
    """Header; per slot 0 (not ready), PHANTOM (joined, nothing here; never for a broadcast
    on rank 0) or 1 + code(priority); per key 1 when its ready allreduce data and the next
    key's lie back to back in one buffer with one dtype (or it has neither and joined)."""
    vector = np.zeros(HEADER + KINDS * keys + keys, np.int64)
    vector[:HEADER] = [int(joined), int(not real), registered]
    for index in range(keys):
        for kind in range(KINDS):
            queue = pending.get(Slot(index, kind))
            if queue:
                head = queue[0]
                code = priority_code(head.priority) if head.ready_at is not None else 0
            elif joined and not (is_root and kind == BROADCAST):
                code = PHANTOM
            else:
                code = 0
            vector[HEADER + KINDS * index + kind] = code
    if joinable:
        for index in range(keys - 1):
            first = pending.get(Slot(index, ALLREDUCE))
            second = pending.get(Slot(index + 1, ALLREDUCE))
            if not first and not second:
                flag = int(joined)
            elif not first or not second:
                flag = 0
            else:
                a, b = first[0], second[0]
                flag = int(a.span is not None and b.span is not None and a.span.root is b.span.root
                           and a.span.stop == b.span.start and a.host.dtype == b.host.dtype)
            vector[HEADER + KINDS * keys + index] = flag
    return vector


def random_state(rng: np.random.Generator, keys: int):
    """Random queues over ``keys`` keys: heads ready or not, some back to back in one buffer,
    some in another buffer or another dtype; the board is updated as the queue would."""
    buffers = [np.zeros(4096, np.float32), np.zeros(4096, np.float32)]
    at = [0, 0]
    pending: dict = {}
    board = Board()
    board.grow(keys)
    for index in range(keys):
        for kind in range(KINDS):
            depth = int(rng.integers(0, 3))
            if not depth:
                continue
            queue = pending[Slot(index, kind)] = deque()
            for _ in range(depth):
                queue.append(Request(Slot(index, kind), index, int(rng.integers(-3, 4))))
            head = queue[0]
            if rng.random() < 0.7:  # ready: its data somewhere
                which = int(rng.integers(0, 2))
                size = int(rng.integers(1, 20))
                if rng.random() < 0.1:
                    host = np.zeros(size, np.float64)  # another dtype, a buffer of its own
                else:
                    host = buffers[which][at[which]:at[which] + size]
                    at[which] += size + (1 if rng.random() < 0.2 else 0)  # a gap sometimes
                    if rng.random() < 0.15:
                        host = host.view(np.int32)  # in line in the buffer, another dtype
                head.host, head.ready_at = host, 1.0
                head.span = span_of(host) if rng.random() < 0.95 else None
            board.set_head(Slot(index, kind), head)
    return pending, board


@pytest.mark.parametrize("seed", range(60))
def test_board_vector_equals_the_walk_over_every_queue(seed):
    rng = np.random.default_rng(seed)
    keys = int(rng.integers(1, 30))
    pending, board = random_state(rng, keys)
    for joined in (False, True):
        for is_root in (False, True):
            for joinable in (False, True):
                agreed_keys = int(rng.integers(1, keys + 1))
                got = board.vector(agreed_keys, joined, True, keys, is_root, joinable)
                want = reference_vector(agreed_keys, pending, joined, True, keys, is_root,
                                        joinable)
                np.testing.assert_array_equal(got, want)


def test_completing_a_head_shows_the_next_request_and_an_empty_queue_shows_none():
    board = Board()
    board.grow(1)
    slot = Slot(0, ALLREDUCE)
    first, second = Request(slot, 0, 5), Request(slot, 0, 0)
    first.host, first.ready_at = np.zeros(2, np.float32), 1.0
    first.span = span_of(first.host)
    board.set_head(slot, first)
    assert read(board.vector(1, False, True, 1, False, True)).agreed == [slot]
    board.set_head(slot, second)  # the next request, not ready yet: nothing to agree on
    assert read(board.vector(1, False, True, 1, False, True)).agreed == []
    board.set_head(slot, None)    # joined with nothing here: zeros stand in (PHANTOM)
    assert board.vector(1, True, False, 1, False, True)[HEADER] == PHANTOM
