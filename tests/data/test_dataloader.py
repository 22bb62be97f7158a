"""DataLoader: batching, shuffling, last-batch handling, engine prefetch, resumable order."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable.data import ArrayDataset, DataLoader, SimpleDataset
from portable.errors import PortableError


def _dataset(n=10):
    return ArrayDataset(np.arange(n * 2, dtype=np.float32).reshape(n, 2), np.arange(n))


@pytest.mark.parametrize("prefetch", [0, 3])
def test_batches_in_order_with_and_without_prefetch(prefetch):
    loader = DataLoader(_dataset(), batch_size=4, prefetch=prefetch)
    batches = list(loader)
    assert len(loader) == 3 and [b[0].shape for b in batches] == [(4, 2), (4, 2), (2, 2)]
    assert isinstance(batches[0][0], pt.nd.NDArray)
    labels = np.concatenate([b[1].asnumpy() for b in batches])
    assert labels.tolist() == list(range(10))


def test_shuffle_covers_every_sample_once_per_epoch_and_differs_between_epochs():
    loader = DataLoader(_dataset(20), batch_size=6, shuffle=True, last_batch="discard", seed=1)
    epochs = [np.concatenate([y.asnumpy() for _, y in loader]) for _ in range(2)]
    assert all(len(e) == 18 and len(set(e.tolist())) == 18 for e in epochs)
    assert epochs[0].tolist() != epochs[1].tolist()


def test_shuffle_order_follows_portable_random_seed():
    def order():
        pt.random.seed(7)
        loader = DataLoader(_dataset(), batch_size=5, shuffle=True)
        return [y.asnumpy().tolist() for _, y in loader]

    assert order() == order()


def test_custom_batchify_and_non_array_dataset():
    ds = SimpleDataset([(i, str(i)) for i in range(5)])
    loader = DataLoader(ds, batch_size=2, batchify_fn=lambda items: [s for _, s in items])
    assert list(loader) == [["0", "1"], ["2", "3"], ["4"]]
    tuples = DataLoader(SimpleDataset([np.ones(2) * i for i in range(4)]), batch_size=2)
    assert [b.asnumpy().sum() for b in tuples] == [2.0, 10.0]


def test_resume_mid_epoch_repeats_the_remaining_batches_exactly():
    def make():
        return DataLoader(_dataset(23), batch_size=4, shuffle=True, seed=5)

    reference = make()
    list(reference)  # epoch 1
    epoch2 = [y.asnumpy().tolist() for _, y in reference]

    loader = make()
    list(loader)
    it = iter(loader)
    seen = [next(it)[1].asnumpy().tolist() for _ in range(2)]
    state = loader.state_dict()
    assert state["batches_done"] == 2

    resumed = make()
    resumed.load_state_dict(state)
    rest = [y.asnumpy().tolist() for _, y in resumed]
    assert seen + rest == epoch2
    # and the epoch after continues the same sequence
    expected = [y.asnumpy().tolist() for _, y in reference]
    assert [y.asnumpy().tolist() for _, y in resumed] == expected


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_failing_sample_is_raised_when_its_batch_is_due(prefetch):
    def bad(x, y):
        if y == 6:
            raise ValueError("broken sample 6")
        return x, y

    loader = DataLoader(_dataset().transform(bad), batch_size=4, prefetch=prefetch)
    it = iter(loader)
    next(it)
    with pytest.raises(ValueError, match="broken sample 6") as info:
        next(it)
    if prefetch:
        assert "DataLoader.batch[1]" in " ".join(info.value.__notes__)
    pt.nd.waitall()  # the engine itself saw no failure


def test_argument_conflicts():
    with pytest.raises(PortableError, match="batch_size"):
        DataLoader(_dataset())
    with pytest.raises(PortableError, match="shuffle"):
        DataLoader(_dataset(), batch_size=2, shuffle=True,
                   sampler=pt.data.SequentialSampler(10))
