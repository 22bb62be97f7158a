"""NDArrayIter's shuffling: the same ``portable.random.seed`` gives the same order in every
process (the Module API tutorial's accuracy moved from run to run while the order came from
NumPy's global generator)."""
from __future__ import annotations

import numpy as np

import portable as pt


def _labels(seed: int, epochs: int = 2) -> list[list[float]]:
    pt.random.seed(seed)
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    it = pt.io.NDArrayIter(x, np.arange(20, dtype=np.float32), batch_size=5, shuffle=True)
    out = []
    for _ in range(epochs):
        it.reset()
        out.append(np.concatenate([b.label[0].asnumpy() for b in it]).tolist())
    return out


def test_shuffled_order_follows_portable_random_seed_not_numpys_global_generator():
    np.random.seed(1)
    first = _labels(7)
    np.random.seed(2)  # (a different global NumPy state must not change the order)
    assert _labels(7) == first
    assert _labels(8) != first


def test_every_epoch_is_a_new_permutation_and_numpys_global_state_is_left_alone():
    state = np.random.get_state()[1].copy()
    epochs = _labels(3, epochs=3)
    assert all(sorted(e) == list(range(20)) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    assert np.array_equal(np.random.get_state()[1], state)


def test_an_unshuffled_iterator_draws_nothing_from_portable_random():
    pt.random.seed(5)
    before = pt.random.get_state()
    pt.io.NDArrayIter(np.zeros((4, 2), np.float32), batch_size=2)
    assert pt.random.get_state() == before
