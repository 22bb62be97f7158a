"""Mirroring (recompute): before/expected graphs."""
from portable.ir import GraphBuilder
from portable.passes.mirror import mirror
from tests.passes.structural import assert_graphs_equal


def _training_like():
    b = GraphBuilder("before")
    x = b.input("x", (4, 4))
    dy = b.input("dy", (4, 4))
    a = b.op("Exp", x)
    c = b.op("Exp", b.op("Neg", a))
    g1 = b.op("Mul", dy, c)  # the backward reads c, then a
    g2 = b.op("Mul", g1, a)
    return b.build([g2]), x, dy


def test_non_checkpoints_are_recomputed_just_before_the_backward_reads_them():
    before, _, _ = _training_like()
    after, report = mirror(before, forward_nodes=3, segments=2)

    e = GraphBuilder("expected")
    x = e.input("x", (4, 4))
    dy = e.input("dy", (4, 4))
    a = e.op("Exp", x)
    b = e.op("Neg", a)  # read by the next segment: a checkpoint, kept
    e.op("Exp", b)
    c_again = e.op("Exp", b)
    g1 = e.op("Mul", dy, c_again)
    a_again = e.op("Exp", x)
    expected = e.build([e.op("Mul", g1, a_again)])
    assert_graphs_equal(after, expected)
    assert report.recomputed_nodes == 2 and report.segments == 2


def test_random_outputs_are_checkpoints():
    import numpy as np

    b = GraphBuilder("g")
    x = b.input("x", (4,))
    d, mask = b.op("Dropout", x, b.const(np.float32(0.5)), outputs=2, training_mode=1)
    h = b.op("Exp", d)
    y = b.op("Mul", h, d)  # "backward" reads d (random: kept) and h (recomputed)
    g = b.build([y])
    after, report = mirror(g, forward_nodes=2, segments=1)
    assert [n.op for n in after.nodes] == ["Dropout", "Exp", "Exp", "Mul"]
    assert after.nodes[-1].inputs[1] == d
    assert report.recomputed_nodes == 1
