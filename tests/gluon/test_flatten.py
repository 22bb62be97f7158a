"""flatten/regroup, the nested-argument helpers of every Block call: round trips, errors, and no
reference cycle (a cycle would keep each call's arrays alive until the cyclic collector ran)."""
from __future__ import annotations

import gc
import weakref

import pytest

from portable.gluon.utils import flatten, regroup


class Leaf:
    pass


def test_round_trip_of_nested_lists_tuples_and_none():
    a, b, c = Leaf(), Leaf(), Leaf()
    value = (a, [b, None, (c,)], None)
    leaves, fmt = flatten(value)
    assert leaves == [a, b, c]
    assert regroup(leaves, fmt) == value
    assert isinstance(regroup(leaves, fmt)[1], list)


def test_regroup_refuses_the_wrong_number_of_leaves():
    leaves, fmt = flatten([Leaf(), Leaf()])
    with pytest.raises(ValueError, match="takes 2 leaves, got 3"):
        regroup(leaves + [Leaf()], fmt)
    with pytest.raises(ValueError, match="more leaves"):
        regroup(leaves[:1], fmt)


def test_is_leaf_rejects_other_values():
    with pytest.raises(TypeError, match="got str"):
        flatten([Leaf(), "x"], lambda v: isinstance(v, Leaf))


def test_the_leaves_are_freed_without_the_cyclic_collector():
    leaf = Leaf()
    alive = weakref.ref(leaf)
    enabled = gc.isenabled()
    gc.disable()
    try:
        leaves, fmt = flatten(([leaf], None))
        regroup(leaves, fmt)
        del leaves, fmt, leaf
        assert alive() is None  # freed by reference counting alone
    finally:
        if enabled:
            gc.enable()
