"""Bad models fail with portable's exceptions whose messages say what is wrong and where:
truncated or corrupted files, unknown ops and domains, missing inputs, wrong dtypes, cycles,
absurd shapes; external data files load from the model's folder."""
import numpy as np
import pytest

from tests.exporters.helpers import make_model, onnx, tensor

from portable.errors import (BindError, GraphError, OpAttributeError, PortableError,
                             SerializationError, ShapeError, UnknownOpError)

from exporters.onnx import backend, import_graph

helper = onnx.helper
X = np.ones((2, 3), np.float32)


def relu_model(opset=17):
    return make_model([helper.make_node("Relu", ["x"], ["y"], name="act")], [("x", X)], ["y"],
                      opset, ir_version=10)


def test_truncated_and_corrupted_files(tmp_path):
    data = relu_model().SerializeToString()
    with pytest.raises(SerializationError, match="truncated or corrupted"):
        import_graph(data[:len(data) // 2])
    with pytest.raises(SerializationError):
        import_graph(b"\xff" * 64)
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(SerializationError, match="no graph"):
        import_graph(str(path))
    with pytest.raises(SerializationError, match="cannot read"):
        import_graph(str(tmp_path / "missing.onnx"))
    with pytest.raises(SerializationError, match="give a path"):
        import_graph(42)


def test_unknown_op_names_op_domain_opset_node_and_range():
    # (every ai.onnx op is declared now: an op name that ONNX does not define either)
    model = make_model([helper.make_node("ImageEncoder", ["x"], ["y"], name="pick")],
                       [("x", X)], ["y"], 20)
    with pytest.raises(UnknownOpError) as info:
        import_graph(model)
    message = str(info.value)
    for part in ("'ImageEncoder'", "ai.onnx", "opset 20", "'pick'", "opsets 7 to"):
        assert part in message


def test_foreign_and_private_domains_and_control_flow():
    node = helper.make_node("FusedGemm", ["x"], ["y"], name="f", domain="com.microsoft")
    model = make_model([node], [("x", X)], ["y"], 17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnknownOpError, match="'com.microsoft'"):
        import_graph(model)
    node = helper.make_node("ConvGradWeight", ["x"], ["y"], domain="portable")
    with pytest.raises(UnknownOpError, match="never read from ONNX"):
        import_graph(make_model([node], [("x", X)], ["y"], 17))
    body = helper.make_graph([], "body", [], [])
    cond = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body, name="if")
    # (control flow is read: a branch without outputs is refused naming the node)
    with pytest.raises(GraphError, match="node 'if'.*declares no outputs"):
        import_graph(make_model([cond], [("c", np.array(True))], ["y"], 17))


def test_opsets_outside_the_range():
    with pytest.raises(UnknownOpError, match="opset 99"):
        import_graph(relu_model(opset=99))
    model = relu_model()
    del model.opset_import[:]
    with pytest.raises(UnknownOpError, match="no ai.onnx opset"):
        import_graph(model)


def test_missing_input_cycle_and_undefined_output():
    missing = make_model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")],
                         [("x", X)], ["y"], 17)
    with pytest.raises(GraphError, match="'nowhere'"):
        import_graph(missing)
    cycle = make_model([helper.make_node("Add", ["x", "b"], ["a"], name="first"),
                        helper.make_node("Relu", ["a"], ["b"], name="second")],
                       [("x", X)], ["b"], 17)
    with pytest.raises(GraphError, match="cycle"):
        import_graph(cycle)
    undefined = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", X)], ["z"], 17)
    with pytest.raises(GraphError, match="'z'"):
        import_graph(undefined)
    twice = make_model([helper.make_node("Relu", ["x"], ["y"]),
                        helper.make_node("Neg", ["x"], ["y"])], [("x", X)], ["y"], 17)
    with pytest.raises(GraphError, match="defined twice"):
        import_graph(twice)


def test_wrong_dtypes():
    mixed = make_model([helper.make_node("Add", ["x", "i"], ["y"], name="add")],
                       [("x", X), ("i", np.ones((2, 3), np.int64))], ["y"], 17)
    rep = backend.prepare(mixed)
    with pytest.raises(ShapeError, match="'add'"):
        rep.run([X, np.ones((2, 3), np.int64)])
    with pytest.raises(BindError, match="dtype"):
        backend.prepare(relu_model()).run([X.astype(np.float64)])
    with pytest.raises(BindError, match="shape"):
        backend.prepare(relu_model()).run([np.ones((4, 4), np.float32)])
    # (bfloat16 and the other ml_dtypes types are element types: complex ones are not)
    complex_input = relu_model()
    complex_input.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.COMPLEX64
    with pytest.raises(ShapeError, match="COMPLEX64"):
        import_graph(complex_input)
    strings = make_model([helper.make_node("Identity", ["c"], ["y"])], [], ["y"], 17,
                         [helper.make_tensor("c", onnx.TensorProto.STRING, [1], [b"a"])])
    # (strings are held, as object arrays of str, and run on the CPU)
    assert backend.prepare(strings).run([])[0].tolist() == ["a"]


def test_bad_attributes():
    wrong_kind = make_model([helper.make_node("Softmax", ["x"], ["y"], axis="last")],
                            [("x", X)], ["y"], 17)
    with pytest.raises(OpAttributeError, match="'axis'"):
        import_graph(wrong_kind)
    unknown = make_model([helper.make_node("Relu", ["x"], ["y"], slope=0.1)], [("x", X)],
                         ["y"], 17)
    with pytest.raises(OpAttributeError, match="unknown attribute 'slope'"):
        import_graph(unknown)


def test_absurd_shapes():
    huge_input = relu_model()
    huge_input.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 10 ** 13
    with pytest.raises(ShapeError, match="elements"):
        import_graph(huge_input)
    negative = relu_model()
    negative.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -3
    with pytest.raises(ShapeError, match="negative"):
        import_graph(negative)
    lying = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", X)], ["y"], 17,
                       [tensor("w", np.ones(3))])
    lying.graph.initializer[0].dims[:] = [1000, 1000]
    with pytest.raises(SerializationError, match="'w'"):
        import_graph(lying)
    enormous = make_model([helper.make_node("ConstantOfShape", ["s"], ["big"]),
                           helper.make_node("Add", ["big", "x"], ["y"])], [("x", X)], ["y"],
                          17, [tensor("s", [10 ** 6, 10 ** 6, 2, 3], np.int64)])
    with pytest.raises(ShapeError, match="GiB"):
        backend.prepare(enormous).run([X])


def test_unsupported_value_types():
    model = relu_model()
    map_type = helper.make_map_type_proto(onnx.TensorProto.INT64,
                                          helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, []))
    model.graph.input[0].CopyFrom(helper.make_value_info("x", map_type))
    with pytest.raises(ShapeError, match="map_type is not supported"):
        import_graph(model)
    # a sequence is a value type (portable.ir.types), but Relu takes none: refused naming it
    model = relu_model()
    seq = helper.make_tensor_sequence_value_info("x", onnx.TensorProto.FLOAT, [2, 3])
    model.graph.input[0].CopyFrom(seq)
    with pytest.raises(PortableError, match=r"\(op Relu\)"):
        backend.prepare(model).run([[np.ones((2, 3), np.float32)]])


def test_external_data(tmp_path):
    weight = np.arange(4096, dtype=np.float32).reshape(64, 64)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [("x", np.ones((2, 64), np.float32))], ["y"], 17, [tensor("w", weight)])
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin",
                    size_threshold=0)
    graph, params = import_graph(str(path))
    np.testing.assert_array_equal(params["w"], weight)
    (y,) = backend.prepare(str(path)).run([np.ones((2, 64), np.float32)])
    np.testing.assert_allclose(y, np.ones((2, 64), np.float32) @ weight, rtol=1e-6)
    with pytest.raises(SerializationError, match="base_dir"):
        import_graph(path.read_bytes())
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(SerializationError, match="external data"):
        import_graph(str(path))


def test_every_error_is_a_portable_error():
    for error in (SerializationError, UnknownOpError, GraphError, ShapeError, BindError,
                  OpAttributeError):
        assert issubclass(error, PortableError)
