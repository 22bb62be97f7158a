"""Speculative rounds without MPI: when a guess is armed, and the verdict that the sum of every
rank's packed buffer gives (the sum an ``Allreduce`` would compute, done here with NumPy)."""
from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from portable.kvstore.requests import Request
from portable.kvstore.slots import ALLREDUCE, BROADCAST, KeyEntry, Slot
from portable.kvstore.speculation import SPECULATE_MAX_BYTES, Guess

F32 = np.dtype("float32")
KEYS = [KeyEntry("w", (3,), 3, F32), KeyEntry("b", (2,), 2, F32), KeyEntry("v", (4,), 4, F32),
        KeyEntry("d", (2,), 2, np.dtype("float64")), KeyEntry("mask", (2,), 2, np.dtype("bool")),
        KeyEntry("big", (1 << 19,), 1 << 19, F32)]
# the allreduce slot of each key above
W, B, V, D, MASK, BIG = (Slot(index, ALLREDUCE) for index in range(len(KEYS)))


def armed(slots: tuple, keys=KEYS, limit=1 << 20, compressing=False) -> tuple | None:
    guess = Guess(limit)
    guess.observe(slots, keys, compressing)
    guess.observe(slots, keys, compressing)
    return guess.slots


def test_a_guess_is_armed_only_when_an_agreement_repeats() -> None:
    guess = Guess(1 << 20)
    guess.observe((W, B), KEYS, False)
    assert guess.slots is None
    guess.observe((W, V), KEYS, False)
    assert guess.slots is None  # not the same set twice
    guess.observe((W, V), KEYS, False)
    assert guess.slots == (W, V)
    guess.drop()
    guess.observe((W, V), KEYS, False)
    assert guess.slots is None  # after a miss, two agreements again


@pytest.mark.parametrize("slots, why", [
    ((W, Slot(1, BROADCAST)), "a broadcast"),
    ((W, D), "two dtypes"),
    ((MASK,), "bool data cannot count the verdict"),
    ((BIG,), "larger than the limit"),
    ((), "nothing agreed"),
])
def test_sets_that_are_never_guessed(slots, why) -> None:
    assert armed(slots, limit=1 << 20) is None, why


def test_the_limit_is_the_bucket_and_at_most_speculate_max_bytes() -> None:
    assert armed((BIG,), limit=8 << 20) is None  # 2 MB > SPECULATE_MAX_BYTES
    assert Guess(8 << 20).limit_bytes == SPECULATE_MAX_BYTES
    assert armed((W,), limit=8) is None          # 12 bytes > an 8-byte bucket
    assert armed((W,), limit=0) is None          # bucket 0: a call per tensor, no guessing
    assert armed((W, B), compressing=True) is None
    assert armed((D,)) == (D,)                   # float64 counts too


def _request(slot: Slot, values) -> Request:
    request = Request(slot, KEYS[slot.index].key, 0)
    request.host = np.asarray(values, KEYS[slot.index].dtype)
    request.ready_at = 1.0
    return request


def _ranks_pack(guess: Guess, pendings: list[dict], joined: list[bool]):
    """Each rank's heads and packed buffer (copies), and their sum."""
    heads, sent = [], []
    for pending, gone in zip(pendings, joined):
        mine = guess.heads(pending, gone)
        heads.append(mine)
        sent.append(guess.pack(mine, KEYS).copy())
    return heads, np.sum(sent, axis=0)


def test_a_guess_that_holds_gives_every_rank_the_sums() -> None:
    guess = Guess(1 << 20)
    guess.observe((W, V), KEYS, False)
    guess.observe((W, V), KEYS, False)
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal(3), rng.standard_normal(4)) for _ in range(3)]
    pendings = [{W: deque([_request(W, w)]), V: deque([_request(V, v)])} for w, v in data]
    heads, total = _ranks_pack(guess, pendings, [False] * 3)
    assert guess.held(total, 3)
    for mine in heads:
        guess.unpack(total, mine, KEYS)
        np.testing.assert_allclose(mine[0].host, sum(w for w, _ in data).astype(np.float32),
                                   rtol=1e-6)
        np.testing.assert_allclose(mine[1].host, sum(v for _, v in data).astype(np.float32),
                                   rtol=1e-6)


def test_a_rank_missing_a_guessed_key_fails_the_guess_for_every_rank() -> None:
    guess = Guess(1 << 20)
    guess.observe((W, V), KEYS, False)
    guess.observe((W, V), KEYS, False)
    not_ready = _request(V, np.ones(4))
    not_ready.ready_at = None
    pendings = [{W: deque([_request(W, np.ones(3))]), V: deque([_request(V, np.ones(4))])},
                {W: deque([_request(W, np.ones(3))]), V: deque([not_ready])},
                {W: deque([_request(W, np.ones(3))])}]  # key "v" not pushed at all
    for others in (pendings[:2], pendings[::2]):
        heads, total = _ranks_pack(guess, others, [False, False])
        assert heads[1] is None
        assert not guess.held(total, 2)


def test_a_joined_rank_stands_in_with_zeros_but_a_guess_needs_a_real_request() -> None:
    guess = Guess(1 << 20)
    guess.observe((W, B), KEYS, False)
    guess.observe((W, B), KEYS, False)
    working = {W: deque([_request(W, [1, 2, 3])]), B: deque([_request(B, [4, 5])])}
    heads, total = _ranks_pack(guess, [working, {}], [False, True])
    assert heads[1] == [None, None] and guess.held(total, 2)
    guess.unpack(total, heads[0], KEYS)
    assert heads[0][0].host.tolist() == [1, 2, 3] and heads[0][1].host.tolist() == [4, 5]
    _, total = _ranks_pack(guess, [{}, {}], [True, True])  # everyone joined, nothing real
    assert not guess.held(total, 2)
