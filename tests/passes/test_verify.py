"""The pipeline's debug verifier: the structure of ``portable.ir.verify`` plus every node's
types and attributes against its op's rule."""
import pytest

from portable.errors import GraphError, OpAttributeError, ShapeError, UnknownOpError
from portable.ir import Graph, GraphBuilder, Node, TensorType
from portable.passes.verify import verify


def test_verify_accepts_a_good_graph_and_refuses_a_bad_structure():
    b = GraphBuilder("good")
    b.op("Relu", b.input("x", (2, 3)), outputs=["y"])
    verify(b.build(["y"]))
    g = Graph(nodes=(Node("Relu", ("ghost",), ("y",)),), inputs=(), outputs=("y",))
    with pytest.raises(GraphError, match="'ghost'"):
        verify(g)


def test_verify_checks_shapes_and_names_node_op_and_shapes():
    b = GraphBuilder("bad")
    x = b.input("x", (2, 3))
    y = b.input("y", (4, 5))
    b.op("MatMul", x, y, outputs=["z"], name="mm")
    with pytest.raises(ShapeError, match=r"node 'mm' \(op MatMul\).*\(2, 3\).*\(4, 5\)"):
        verify(b.build(["z"]))


def test_unknown_op_and_attribute():
    g = Graph(nodes=(Node("Rleu", ("x",), ("y",)),), inputs=(("x", TensorType((2,))),),
              outputs=("y",))
    with pytest.raises(UnknownOpError, match="Rleu.*did you mean Relu"):
        verify(g)
    g = Graph(nodes=(Node("Relu", ("x",), ("y",), {"alpha": 1.0}),),
              inputs=(("x", TensorType((2,))),), outputs=("y",))
    with pytest.raises(OpAttributeError, match="unknown attribute.*alpha"):
        verify(g)
