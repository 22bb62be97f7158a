"""pack-sub-byte-weights and the widening rule of constant folding, before and after."""
import numpy as np
import pytest

from portable.ir import Graph, Node, TensorType
from portable.passes.fold_constants import fold_constants
from portable.passes.pack_weights import pack_sub_byte_weights

ml_dtypes = pytest.importorskip("ml_dtypes", reason="int4 is an ml_dtypes type")

W = np.array([[1, -2, 3], [-8, 7, 0]], ml_dtypes.int4)


def _graph(weight=W):
    nodes = (Node("DequantizeLinear", ("w", "s"), ("wf",), name="dq"),
             Node("MatMul", ("x", "wf"), ("y",), name="mm"))
    return Graph(nodes=nodes, inputs=(("x", TensorType((1, 2), "float32")),), outputs=("y",),
                 initializers={"w": weight, "s": np.float32(0.5)})


def test_an_int4_weight_is_held_packed_and_unpacked_under_its_name():
    packed = pack_sub_byte_weights(_graph())
    unpack = packed.nodes[0]
    assert unpack.op == "portable.UnpackBits" and unpack.outputs == ("w",)
    assert dict(unpack.attrs) == {"to": 22, "shape": (2, 3)}
    source = packed.initializers[unpack.inputs[0]]
    # ONNX's layout, written out: 1 | -2 << 4, 3 | -8 << 4, 7 | 0 << 4
    assert source.dtype == np.uint8 and source.tolist() == [0xE1, 0x83, 0x07]
    assert "w" not in packed.initializers
    assert [n.op for n in packed.nodes[1:]] == ["DequantizeLinear", "MatMul"]


def test_folding_leaves_the_widening_to_run_per_use():
    folded = fold_constants(pack_sub_byte_weights(_graph()))
    assert [n.op for n in folded.nodes] == ["portable.UnpackBits", "DequantizeLinear", "MatMul"]
    # a weight of a dtype the device cannot hold is widened once instead
    cannot = fold_constants(_graph(), holds=lambda dtype: dtype != W.dtype)
    assert [n.op for n in cannot.nodes] == ["MatMul"]
    assert cannot.initializers["wf"].dtype == np.float32


def test_narrowing_and_same_width_weights_still_fold():
    narrowing = Graph(nodes=(Node("Cast", ("w",), ("h",), {"to": 10}, name="c"),
                             Node("Add", ("x", "h"), ("y",), name="a")),
                      inputs=(("x", TensorType((3,), "float16")),), outputs=("y",),
                      initializers={"w": np.ones(3, np.float32)})
    assert [n.op for n in fold_constants(narrowing).nodes] == ["Add"]


def test_nothing_to_pack_returns_the_graph_itself():
    graph = _graph(np.ones((2, 3), np.int8))
    assert pack_sub_byte_weights(graph) is graph
    unheld = _graph()
    assert pack_sub_byte_weights(unheld, holds=lambda dtype: False) is unheld
