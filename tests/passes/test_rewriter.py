"""The pattern -> replacement rewriter."""
import numpy as np
import pytest

from portable.errors import GraphError
from portable.ir import GraphBuilder, Node
from portable.passes.rewriter import Pattern, Rewrite, Rule, rewrite


def _neg_neg(m):
    inner = m["inner"]
    return Rewrite(renames={m.root.outputs[0]: inner.inputs[0]})


NEG_NEG = Rule("neg-neg", Pattern("Neg", Pattern("Neg", name="inner"), name="outer"), _neg_neg)


def test_a_pattern_matches_producers_and_rewrites_to_a_rename():
    b = GraphBuilder("g")
    x = b.input("x", (3,))
    y = b.op("Relu", b.op("Neg", b.op("Neg", x)))
    out = rewrite(b.build([y]), [NEG_NEG])
    assert [(n.op, n.inputs) for n in out.nodes] == [("Relu", ("x",))]


def test_an_inner_node_read_elsewhere_does_not_match():
    b = GraphBuilder("g")
    x = b.input("x", (3,))
    inner = b.op("Neg", x)
    g = b.build([b.op("Neg", inner), inner])
    assert rewrite(g, [NEG_NEG]) is g


def test_replacement_nodes_take_the_roots_place_and_rules_may_decline():
    def to_abs(m):
        node = m.root
        if m.type(node.inputs[0]).shape != (3,):
            return None
        return Rewrite([Node("Abs", node.inputs, node.outputs)])

    rule = Rule("relu-to-abs", Pattern("Relu", name="r"), to_abs)
    b = GraphBuilder("g")
    x = b.input("x", (3,))
    z = b.input("z", (4,))
    g = b.build([b.op("Neg", b.op("Relu", x)), b.op("Relu", z)])
    out = rewrite(g, [rule])
    assert [n.op for n in out.nodes] == ["Abs", "Neg", "Relu"]


def test_a_rule_that_never_settles_is_reported():
    def flip(m):
        node = m.root
        return Rewrite([Node("Neg", node.inputs, node.outputs)])

    rule = Rule("flip", Pattern("Neg", name="n"), flip)
    b = GraphBuilder("g")
    g = b.build([b.op("Neg", b.input("x", (2,)))])
    with pytest.raises(GraphError, match="did not settle"):
        rewrite(g, [rule], max_sweeps=3)


def test_match_exposes_constants_and_fresh_names():
    seen = {}

    def look(m):
        seen["c"] = m.const(m.root.inputs[1])
        seen["fresh"] = m.fresh("w")
        return None

    b = GraphBuilder("g")
    x = b.input("x", (3,))
    g = b.build([b.op("Mul", x, b.const(np.float32(3)))])
    rewrite(g, [Rule("look", Pattern("Mul"), look)])
    assert seen["c"] == 3 and seen["fresh"].startswith("w_")
