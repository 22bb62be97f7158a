"""Sequences and optionals as values: fed, returned, exported and read back, and refused
cleanly where they do not fit (the op table, ``cases_sequence.py``, checks each op's values).

Expected values come from onnx.reference on the same model.
"""
import numpy as np
import pytest

from portable.errors import BindError, PortableError, ShapeError
from portable.ir import GraphBuilder, OptionalType, SequenceType, TensorType
from portable.ir.types import join, type_of_value

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from exporters.onnx import backend  # noqa: E402
from exporters.onnx.exporter import export_graph  # noqa: E402

I64 = np.int64


def _model(nodes, inputs, outputs, opset=21):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _pipeline():
    """split x in pieces of 2 rows, insert s[0], concatenate; length; an optional of it."""
    b = GraphBuilder("seq")
    b.inputs.append(("s", SequenceType(TensorType((None, 3), "float32"))))
    x = b.input("x", (5, 3))
    pieces = b.op("SplitToSequence", x, b.const(np.array(2, I64)))
    first = b.op("SequenceAt", "s", b.const(np.array(0, I64)))
    both = b.op("SequenceInsert", pieces, first, b.const(np.array(0, I64)))
    joined = b.op("ConcatFromSequence", both, axis=0)
    length = b.op("SequenceLength", both)
    held = b.op("Optional", joined)
    return b.build([joined, length, both, b.op("OptionalHasElement", held)])


S = [np.full((1, 3), 7, np.float32), np.zeros((2, 3), np.float32)]
X = np.arange(15, dtype=np.float32).reshape(5, 3)


@pytest.mark.parametrize("device", ["CPU", "OPENCL"])
def test_a_graph_of_sequences_exports_reads_back_and_matches_onnx_reference(device):
    if device == "OPENCL":
        pytest.importorskip("pyopencl")
        if not backend.supports_device("OPENCL"):
            pytest.skip("no OpenCL device whose compiler works here (see portable.opencl(0))")
    model = export_graph(_pipeline())
    kinds = [v.type.WhichOneof("value") for v in model.graph.input]
    assert kinds == ["sequence_type", "tensor_type"]
    assert model.graph.output[2].type.WhichOneof("value") == "sequence_type"
    rep = backend.prepare(model, device)
    assert rep.graph.input_types["s"] == SequenceType(TensorType((None, 3), "float32"))
    got = rep.run([S, X])
    want = ReferenceEvaluator(model).run(None, {"s": S, "x": X})
    np.testing.assert_array_equal(got[0], want[0])
    assert int(got[1]) == int(want[1]) == 4
    assert isinstance(got[2], list) and len(got[2]) == 4
    for g, w in zip(got[2], want[2]):
        np.testing.assert_array_equal(g, w)
    assert bool(got[3]) is True
    # the sequences ran between planned segments: allocated at run time, never planned
    plan = rep.plan(rep._feeds([S, X]))
    placed = plan.placement()
    assert model.graph.output[2].name in placed["runtime"]
    assert model.graph.output[2].name not in placed["planned"]


def test_an_empty_optional_is_fed_as_none_and_returned_as_none():
    opt = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    model = _model([helper.make_node("OptionalHasElement", ["o"], ["has"]),
                    helper.make_node("Identity", ["o"], ["same"])],
                   [helper.make_value_info("o", opt)],
                   [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                    helper.make_value_info("same", opt)], opset=18)
    rep = backend.prepare(model, "CPU")
    has, same = rep.run([None])
    assert bool(has) is False and same is None
    has, same = rep.run([np.array([1, 2], np.float32)])
    assert bool(has) is True
    np.testing.assert_array_equal(same, [1, 2])


def test_a_sequence_op_given_a_tensor_fails_naming_the_node():
    model = _model([helper.make_node("SequenceAt", ["x", "i"], ["y"], name="pick")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                    helper.make_tensor_value_info("i", TensorProto.INT64, [])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(ShapeError, match=r"node 'pick' \(op SequenceAt\).*must be a sequence"):
        backend.prepare(model, "CPU").run([np.zeros((2, 3), np.float32), np.array(0, I64)])


def test_a_tensor_op_given_a_sequence_fails_naming_the_node():
    b = GraphBuilder("bad")
    b.inputs.append(("s", SequenceType(TensorType((2,), "float32"))))
    b.op("MatMul", "s", b.const(np.ones((2, 2), np.float32)), outputs=["y"], name="mm")
    from portable.passes.infer import infer_types
    with pytest.raises(PortableError, match=r"node 'mm' \(op MatMul\)"):
        infer_types(b.build(["y"]))
    # at run time too: a sequence made by a node, read by a tensor op
    model = _model([helper.make_node("SplitToSequence", ["x"], ["s"]),
                    helper.make_node("Relu", ["s"], ["y"], name="act")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(ShapeError, match=r"node 'act' \(op Relu\): input 's' \(#0\) is seq"):
        backend.prepare(model, "CPU").run([np.zeros((2, 3), np.float32)])


def test_a_position_out_of_range_at_run_time_fails_naming_the_node():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    model = _model([helper.make_node("SequenceAt", ["s", "i"], ["y"], name="at")],
                   [seq, helper.make_tensor_value_info("i", TensorProto.INT64, [])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    rep = backend.prepare(model, "CPU")
    np.testing.assert_array_equal(rep.run([S, np.array(-2, I64)])[0], S[0])
    with pytest.raises(ShapeError, match=r"node 'at'.*position 2 is out of range \[-2, 1\]"):
        rep.run([S, np.array(2, I64)])


def test_concatenating_an_empty_sequence_fails_naming_the_node():
    model = _model([helper.make_node("SequenceEmpty", [], ["e"]),
                    helper.make_node("ConcatFromSequence", ["e"], ["y"], axis=0, name="cat")],
                   [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(ShapeError, match=r"node 'cat'.*empty sequence"):
        backend.prepare(model, "CPU").run([])


def test_feeds_are_checked_against_sequence_and_optional_types():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [None, 3])
    model = _model([helper.make_node("SequenceLength", ["s"], ["n"])], [seq],
                   [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    rep = backend.prepare(model, "CPU")
    assert int(rep.run([[np.zeros((4, 3), np.float32)] * 3])[0]) == 3
    assert int(rep.run([[]])[0]) == 0
    with pytest.raises(BindError, match=r"input 's' declares a sequence"):
        rep.run([np.zeros((4, 3), np.float32)])
    with pytest.raises(BindError, match=r"input 's' \(element 1\) has shape \(4, 2\)"):
        rep.run([[np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32)]])


def test_maps_are_refused_naming_the_input():
    map_type = helper.make_map_type_proto(TensorProto.INT64,
                                          helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    model = _model([helper.make_node("Identity", ["m"], ["y"])],
                   [helper.make_value_info("m", map_type)],
                   [helper.make_value_info("y", map_type)])
    with pytest.raises(ShapeError, match=r"graph input 'm': type map_type is not supported"):
        backend.prepare(model, "CPU")


def test_types_join_and_describe_values():
    empty = SequenceType(dtype="float32", length=0)
    two = SequenceType(TensorType((2, 3), "float32"), length=2)
    assert join(empty, two) == SequenceType(TensorType((2, 3), "float32"))
    assert join(two, SequenceType(TensorType((4, 3), "float32"), length=2)) == \
        SequenceType(TensorType((None, 3), "float32"), length=2)
    assert join(two, SequenceType(TensorType((2,), "float32"))) == SequenceType(dtype="float32")
    assert join(two, TensorType((2, 3), "float32")) is None
    assert join(OptionalType(two), OptionalType(empty)) == \
        OptionalType(SequenceType(TensorType((2, 3), "float32")))
    assert type_of_value(S) == SequenceType(TensorType((None, 3), "float32"), length=2)
    assert not two.is_static and two.dtype == np.float32
