"""A declared group's arrays are checked once and trusted while they stay the same
(``portable.kvstore.gather.Gather.same_arrays``): what must make it check again.

No MPI needed: the rule is a property of the group's record, which the queue consults before
it skips the shape, dtype and host-data checks of a ``pushpull``.
"""
from __future__ import annotations

import numpy as np

import portable as pt
from portable.kvstore.gather import Gather
from portable.kvstore.slots import KeyEntry

F32 = np.dtype("float32")


def _group() -> tuple[Gather, list]:
    gather = Gather((0, 1), [KeyEntry(0, (3,), 3, F32), KeyEntry(1, (2,), 2, F32)])
    arrays = [pt.nd.zeros((3,)), pt.nd.zeros((2,))]
    gather.remember(arrays)
    return gather, arrays


def test_the_same_arrays_on_the_same_data_are_trusted():
    gather, arrays = _group()
    assert gather.same_arrays(list(arrays))  # (a new list of the same arrays)


def test_another_array_a_missing_one_or_new_data_are_checked_again():
    gather, arrays = _group()
    assert not gather.same_arrays([arrays[0], pt.nd.zeros((2,))])  # another array
    assert not gather.same_arrays([arrays[1], arrays[0]])          # another order
    assert not gather.same_arrays(arrays[:1])                       # fewer
    arrays[1]._data = np.zeros((4,), F32)  # the same array object on other data
    assert not gather.same_arrays(arrays)


def test_a_new_group_trusts_nothing():
    gather = Gather((0,), [KeyEntry(0, (1,), 1, F32)])
    assert not gather.same_arrays([pt.nd.zeros((1,))])
