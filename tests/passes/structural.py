"""Structural graph comparison for before/expected pass tests.

Two graphs are equal when they have the same inputs and, node by node in order, the same op,
attributes and inputs, up to a renaming of the values the nodes compute (passes make fresh
names) and of constants (compared by value).
"""
from __future__ import annotations

import numpy as np

from portable.ir import Graph, format_graph
from portable.ir.graph import attrs_equal


def assert_graphs_equal(actual: Graph, expected: Graph, rtol: float = 1e-6) -> None:
    """Raise AssertionError, printing both graphs, when they differ structurally."""
    try:
        _compare(actual, expected, rtol)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- actual:\n{format_graph(actual)}\n--- expected:\n"
                             f"{format_graph(expected)}") from None


def _compare(actual: Graph, expected: Graph, rtol: float) -> None:
    assert actual.inputs == expected.inputs, "graph inputs differ"
    names = {name: name for name in actual.input_names}

    def same_value(a: str, e: str) -> bool:
        if a in names:
            return names[a] == e
        if a in actual.initializers and e in expected.initializers:
            x, y = actual.initializers[a], expected.initializers[e]
            if x.dtype == y.dtype and x.shape == y.shape and np.allclose(x, y, rtol=rtol):
                names[a] = e
                return True
        return False

    assert len(actual.nodes) == len(expected.nodes), \
        f"{len(actual.nodes)} nodes, expected {len(expected.nodes)}"
    for i, (a, e) in enumerate(zip(actual.nodes, expected.nodes)):
        assert a.op == e.op, f"node #{i}: op {a.op}, expected {e.op}"
        assert attrs_equal(a.attrs, e.attrs), f"node #{i} ({a.op}): attrs {dict(a.attrs)}, " \
                                              f"expected {dict(e.attrs)}"
        assert len(a.inputs) == len(e.inputs), f"node #{i} ({a.op}): input count"
        for j, (x, y) in enumerate(zip(a.inputs, e.inputs)):
            assert (not x and not y) or same_value(x, y), \
                f"node #{i} ({a.op}): input {j} is {x!r}, expected {y!r}"
        assert len(a.outputs) == len(e.outputs), f"node #{i} ({a.op}): output count"
        for x, y in zip(a.outputs, e.outputs):
            assert bool(x) == bool(y), f"node #{i} ({a.op}): outputs {a.outputs} vs {e.outputs}"
            if x:
                names[x] = y
    assert len(actual.outputs) == len(expected.outputs), "output count differs"
    for x, y in zip(actual.outputs, expected.outputs):
        assert same_value(x, y), f"graph output {x!r}, expected {y!r}"
