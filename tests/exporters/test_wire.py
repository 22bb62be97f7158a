"""The wire-format reader (``exporters/onnx/wire.py`` + ``reading.py``) reads what ``onnx.load``
reads: the same graph (nodes, attributes, inputs, outputs, opsets) and bit-identical weights,
on the nine light models, models our exporter writes (round trips), PyTorch-exported models
(``tests/exporters/data/torch``) and hand-made models covering every tensor encoding."""
import glob
import os

import numpy as np
import pytest

from tests.exporters.helpers import light_models, make_model, onnx
from tests.exporters.test_roundtrip_symbol import _trained_executor, lenet_batchnorm

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from portable.io.onnx import reading, schemas, wire  # noqa: E402
from portable.errors import SerializationError  # noqa: E402
from portable.models.symbolic import lenet, mlp  # noqa: E402

TORCH_MODELS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "data", "torch",
                                             "*.onnx")))


def _attribute(attr):
    """An attribute's value as onnx.helper gives it, in the reader's terms."""
    value = helper.get_attribute_value(attr)
    if attr.type == onnx.AttributeProto.TENSOR:
        return numpy_helper.to_array(value)
    if attr.type == onnx.AttributeProto.STRING:
        return value.decode()
    if attr.type == onnx.AttributeProto.STRINGS:
        return [v.decode() for v in value]
    return value


def _value_type(info):
    tensor = info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    return dims, tensor.elem_type


def assert_same_model(data: bytes):
    """``data`` read by the wire reader and by onnx agree field by field."""
    expected = onnx.ModelProto.FromString(data)
    got = wire.parse_model(data)
    assert got.ir_version == expected.ir_version
    assert [(o.domain, o.version) for o in got.opset_import] == \
        [(o.domain, o.version) for o in expected.opset_import]
    assert got.graph.name == expected.graph.name
    assert len(got.graph.node) == len(expected.graph.node)
    for mine, theirs in zip(got.graph.node, expected.graph.node):
        assert (mine.name, mine.op_type, mine.domain) == \
            (theirs.name, theirs.op_type, theirs.domain)
        assert list(mine.input) == list(theirs.input)
        assert list(mine.output) == list(theirs.output)
        assert [a.name for a in mine.attribute] == [a.name for a in theirs.attribute]
        for a, b in zip(mine.attribute, theirs.attribute):
            assert a.type == b.type
            if b.type in schemas.ATTRIBUTE_KINDS:
                _, value = reading.attribute_value(a, "test")
                want = _attribute(b)
                if isinstance(want, np.ndarray):
                    assert value.dtype == want.dtype and value.shape == want.shape
                    np.testing.assert_array_equal(value, want)
                else:
                    assert value == pytest.approx(want)
    assert [t.name for t in got.graph.initializer] == \
        [t.name for t in expected.graph.initializer]
    for mine, theirs in zip(got.graph.initializer, expected.graph.initializer):
        array, want = reading.tensor_to_array(mine, "test"), numpy_helper.to_array(theirs)
        assert array.dtype == want.dtype and array.shape == want.shape, mine.name
        assert array.tobytes() == want.tobytes(), mine.name  # bit for bit
    for ours, theirs in ((got.graph.input, expected.graph.input),
                         (got.graph.output, expected.graph.output)):
        assert [i.name for i in ours] == [i.name for i in theirs]
        for a, b in zip(ours, theirs):
            if b.type.HasField("tensor_type") and b.type.tensor_type.HasField("shape"):
                type_ = reading.value_type(a, "test")
                dims, _ = _value_type(b)
                assert list(type_.shape) == dims


@pytest.mark.parametrize("path", light_models(), ids=os.path.basename)
def test_light_models_read_as_onnx_reads_them(path):
    with open(path, "rb") as handle:
        assert_same_model(handle.read())


@pytest.mark.parametrize("path", TORCH_MODELS, ids=os.path.basename)
def test_pytorch_exported_models_read_as_onnx_reads_them(path):
    with open(path, "rb") as handle:
        assert_same_model(handle.read())


def test_there_are_pytorch_exported_models():
    assert len(TORCH_MODELS) >= 7, "run python -m tests.exporters.torch_fixtures"


@pytest.mark.parametrize("build,shape", [(lambda: mlp(hidden=(32, 16)), (4, 20)),
                                         (lambda: lenet(channels=(4, 8)), (2, 1, 12, 12)),
                                         (lenet_batchnorm, (3, 1, 12, 12))],
                         ids=["mlp", "lenet", "lenet_batchnorm"])
def test_models_our_exporter_writes_read_as_onnx_reads_them(build, shape):
    """The round-trip models of test_roundtrip_symbol, weights from a few training steps."""
    from exporters.onnx import export_model

    net = build()
    args, aux = _trained_executor(net, shape)
    model = export_model(net, (args, aux), input_shapes={"data": shape}, dynamic_batch=True)
    assert_same_model(model.SerializeToString())


def test_every_tensor_encoding_reads_as_onnx_reads_it():
    """Typed fields of every supported element type (negative ints, float16 bit patterns,
    uint64), raw data, empty tensors, non-packed repeated fields and every attribute kind."""
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f64": rng.standard_normal(4),
        "f16": rng.standard_normal(5).astype(np.float16),
        "i64": np.array([-(2 ** 62), -1, 0, 7, 2 ** 62], np.int64),
        "i32": np.array([-(2 ** 31), -5, 3, 2 ** 31 - 1], np.int32),
        "i16": np.array([-300, 300], np.int16), "i8": np.array([-128, 127], np.int8),
        "u8": np.array([0, 255], np.uint8), "u16": np.array([65535], np.uint16),
        "u32": np.array([2 ** 32 - 1], np.uint32), "u64": np.array([2 ** 64 - 1], np.uint64),
        "b": np.array([True, False, True]), "empty": np.zeros((0, 3), np.float32),
    }
    initializers = []
    for name, array in arrays.items():
        code = helper.np_dtype_to_tensor_dtype(array.dtype)
        # make_tensor stores float16 values as their bit patterns in int32_data
        initializers.append(helper.make_tensor(name, code, array.shape, array.flatten()))
        initializers.append(helper.make_tensor(name + "_raw", code, array.shape,
                                               array.tobytes(), raw=True))
    node = helper.make_node(
        "Constant", [], ["c"], name="ünïcode node",
        value=helper.make_tensor("v", TensorProto.INT64, [3], [-3, 0, 3]))
    other = helper.make_node("Concat", ["c", "c"], ["d"], axis=-1, note="text",
                             floats=[1.5, -2.0], ints=[-1, 2 ** 40], strings=["a", "β"])
    model = make_model([node, other], [], ["d"], 17, initializers)
    data = model.SerializeToString()
    assert_same_model(data)
    for name, array in arrays.items():  # and the values are the arrays we wrote
        for suffix in ("", "_raw"):
            tensor = next(t for t in wire.parse_model(data).graph.initializer
                          if t.name == name + suffix)
            np.testing.assert_array_equal(reading.tensor_to_array(tensor, "t"), array)


def test_non_packed_repeated_fields_read():
    """proto2-style writers emit one tag per repeated number; both forms must read."""
    tensor = helper.make_tensor("t", TensorProto.INT64, [3], [4, -5, 6])
    # hand-encode dims (field 1) and int64_data (field 7) unpacked: tag, varint per value
    def varint(n):
        n &= (1 << 64) - 1
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)
    body = varint(1 << 3) + varint(3) + varint(2 << 3) + varint(TensorProto.INT64)
    body += b"".join(varint(7 << 3) + varint(v) for v in (4, -5, 6))
    body += varint((8 << 3) | 2) + varint(1) + b"t"
    parsed = wire._parse(wire.Tensor, memoryview(body), 0, len(body))
    expected = numpy_helper.to_array(onnx.TensorProto.FromString(body))
    np.testing.assert_array_equal(reading.tensor_to_array(parsed, "t"), expected)
    np.testing.assert_array_equal(expected, numpy_helper.to_array(tensor))


def test_external_data_is_mapped_not_copied(tmp_path):
    from onnx.external_data_helper import convert_model_to_external_data

    weight = np.arange(4096, dtype=np.float32).reshape(64, 64)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [("x", np.zeros((1, 64), np.float32))], ["y"], 17,
                       [numpy_helper.from_array(weight, "w")])
    convert_model_to_external_data(model, location="weights.bin", size_threshold=0)
    onnx.save(model, str(tmp_path / "m.onnx"))
    parsed, _ = wire.load_model(str(tmp_path / "m.onnx"))
    array = reading.tensor_to_array(parsed.graph.initializer[0], "w")
    np.testing.assert_array_equal(array, weight)
    assert not array.flags.owndata and not array.flags.writeable


def test_external_data_outside_the_model_folder_is_refused(tmp_path):
    model = make_model([helper.make_node("Relu", ["w"], ["y"])], [], ["y"], 17,
                       [numpy_helper.from_array(np.ones(4, np.float32), "w")])
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "../../etc/passwd"
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(SerializationError, match="must name a file inside"):
        wire.load_model(str(path))


@pytest.mark.parametrize("cut", [1, 7, 100, -1])
def test_truncated_files_are_refused_naming_the_file(tmp_path, cut):
    path = light_models()[0]
    with open(path, "rb") as handle:
        data = handle.read()
    bad = tmp_path / "cut.onnx"
    bad.write_bytes(data[:cut] if cut > 0 else data[:-3])
    with pytest.raises(SerializationError, match="cut.onnx"):
        wire.load_model(str(bad))


def test_the_schema_snapshot_matches_the_installed_onnx():
    """``onnx_schemas.json`` says what onnx.defs says (regenerate with
    ``python -m portable.io.onnx.schemas`` when onnx adds an opset)."""
    live = schemas.build_snapshot()
    snapshot = schemas._snapshot()
    newest = snapshot["newest_opset"]
    for op, versions in snapshot["versions"].items():
        assert [v for v in live["versions"].get(op, []) if v <= newest] == versions, op
        assert snapshot["schemas"][op] == {k: v for k, v in live["schemas"][op].items()
                                           if int(k) <= newest}, op
