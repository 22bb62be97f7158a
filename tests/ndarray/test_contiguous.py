"""contiguous_zeros: arrays back to back in one buffer, each with its own engine var."""
from __future__ import annotations

import numpy as np

import portable as pt


def test_arrays_are_zero_back_to_back_and_independent():
    xs = pt.nd.contiguous_zeros([(2, 3), 4, (1,)], dtype="float64")
    assert [x.shape for x in xs] == [(2, 3), (4,), (1,)]
    assert all(x.dtype == np.float64 for x in xs)
    assert [x.asnumpy().tolist() for x in xs] == [[[0.0] * 3] * 2, [0.0] * 4, [0.0]]
    starts = [x._data.__array_interface__["data"][0] for x in xs]
    assert [b - a for a, b in zip(starts, starts[1:])] == [6 * 8, 4 * 8]
    xs[1][:] = 5.0  # a write to one is ordered on its own var and touches no neighbour
    xs[0] += 1.0
    assert xs[1].asnumpy().tolist() == [5.0] * 4
    assert xs[0].asnumpy().sum() == 6.0 and xs[2].asnumpy().tolist() == [0.0]
