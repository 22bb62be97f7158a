"""Datasets and samplers."""
from __future__ import annotations

import numpy as np
import pytest

from portable.data import (ArrayDataset, BatchSampler, RandomSampler, SequentialSampler,
                           SimpleDataset)
from portable.errors import PortableError, ShapeError


def test_array_dataset_samples_and_transforms():
    x, y = np.arange(12).reshape(6, 2), np.arange(6) * 10
    ds = ArrayDataset(x, y)
    assert len(ds) == 6
    a, b = ds[4]
    assert a.tolist() == [8, 9] and b == 40
    doubled = ds.transform_first(lambda v: v * 2)
    assert doubled[4][0].tolist() == [16, 18] and doubled[4][1] == 40
    swapped = ds.transform(lambda v, label: (label, v), lazy=False)
    assert isinstance(swapped, SimpleDataset) and swapped[1][0] == 10
    assert len(ds.filter(lambda s: s[1] >= 30)) == 3
    assert len(ds.take(2)) == 2
    shards = [ds.shard(4, i) for i in range(4)]
    assert [len(s) for s in shards] == [2, 2, 1, 1]
    assert [int(s[0][1]) for s in shards] == [0, 20, 40, 50]


def test_array_dataset_length_mismatch():
    with pytest.raises(ShapeError, match=r"\[3, 2\]"):
        ArrayDataset(np.zeros(3), np.zeros(2))


@pytest.mark.parametrize("last_batch,expected", [
    ("keep", [[0, 1, 2], [3, 4, 5], [6]]),
    ("discard", [[0, 1, 2], [3, 4, 5]]),
    ("rollover", [[0, 1, 2], [3, 4, 5]]),
])
def test_batch_sampler_last_batch_policies(last_batch, expected):
    sampler = BatchSampler(SequentialSampler(7), 3, last_batch)
    assert len(sampler) == len(expected)
    assert list(sampler) == expected
    if last_batch == "rollover":  # the leftover sample starts the next epoch
        assert list(sampler) == [[6, 0, 1], [2, 3, 4]]
        assert list(sampler)[0] == [5, 6, 0]


def test_random_sampler_is_a_permutation_and_restores_its_state():
    sampler = RandomSampler(50, seed=3)
    state = sampler.state_dict()
    first, second = list(sampler), list(sampler)
    assert sorted(first) == list(range(50)) and first != second
    sampler.load_state_dict(state)
    assert list(sampler) == first


def test_bad_sampler_arguments():
    with pytest.raises(PortableError, match="last_batch"):
        BatchSampler(SequentialSampler(3), 2, "drop")
    with pytest.raises(PortableError, match="batch_size"):
        BatchSampler(SequentialSampler(3), 0)
