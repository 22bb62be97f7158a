"""Models in ONNX's low-precision element types (ml_dtypes' bfloat16, int4/uint4, float8), built
with onnx.helper as exporters write them: a model with bfloat16 weights, an int4 weight-only
model (blocked DequantizeLinear along the weight's input axis, as onnxruntime's MatMulNBits
quantizer writes it in QDQ form) and a float8 QDQ model. portable imports each (through the
onnx backend and the Predictor) and computes what onnxruntime computes; OpenCL, which has no C
type for them, refuses them naming the tensor and the backend."""
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.exporters.helpers import make_model, onnx, ort_run

from exporters.onnx import backend
from portable.predict import Predictor

ml_dtypes = pytest.importorskip("ml_dtypes", reason="the low-precision types come from ml_dtypes")
helper, numpy_helper, TensorProto = onnx.helper, onnx.numpy_helper, onnx.TensorProto
RNG = np.random.default_rng(0)


def _bfloat16_model(raw: bool):
    """x @ W + b with W and b stored as bfloat16 (cast up to float32 to compute); the result
    also rounded to bfloat16, as a graph output and cast back to float32. ``raw``: the weights
    in raw_data, else in int32_data (bit patterns)."""
    w = RNG.normal(0, 0.5, (8, 6)).astype(ml_dtypes.bfloat16)
    b = RNG.normal(0, 0.5, (6,)).astype(ml_dtypes.bfloat16)
    if raw:
        inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    else:
        inits = [helper.make_tensor(n, TensorProto.BFLOAT16, v.shape,
                                    v.astype(np.float32).ravel().tolist())
                 for n, v in (("w", w), ("b", b))]
    nodes = [
        helper.make_node("Cast", ["w"], ["w32"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["b"], ["b32"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["x", "w32"], ["m"]),
        helper.make_node("Add", ["m", "b32"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
        helper.make_node("Cast", ["y"], ["y16"], to=TensorProto.BFLOAT16),
        helper.make_node("Cast", ["y16"], ["y_rounded"], to=TensorProto.FLOAT),
    ]
    x = RNG.normal(0, 1, (3, 8)).astype(np.float32)
    return make_model(nodes, [("x", x)], ["y", "y_rounded", "y16"], 21, inits), x


def _int4_weight_only_model(signed: bool):
    """x @ DequantizeLinear(W4, scale, zero_point) with one scale and zero point per block of
    8 rows of W (the weight's input axis, axis 0) and per column; 15 x 5 weights, so the packed
    data ends in half a byte and the last block is short."""
    k, n, block = 15, 5, 8
    dtype, code = (ml_dtypes.int4, TensorProto.INT4) if signed else \
        (ml_dtypes.uint4, TensorProto.UINT4)
    low, high = (-8, 8) if signed else (0, 16)
    w = RNG.integers(low, high, (k, n)).astype(dtype)
    zero = RNG.integers(low, high, (2, n)).astype(dtype)
    scale = RNG.uniform(0.01, 0.1, (2, n)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(scale, "scale"),
             numpy_helper.from_array(zero, "zero")]
    assert inits[0].data_type == code and len(inits[0].raw_data) == (k * n + 1) // 2  # packed
    nodes = [helper.make_node("DequantizeLinear", ["w", "scale", "zero"], ["wd"], axis=0,
                              block_size=block),
             helper.make_node("MatMul", ["x", "wd"], ["y"])]
    x = RNG.normal(0, 1, (4, k)).astype(np.float32)
    return make_model(nodes, [("x", x)], ["y"], 21, inits), x


def _float8_qdq_model():
    """Activations quantized to float8e4m3fn and back (saturating: some exceed 448), weights
    stored as float8e4m3fn with a per-column scale, then MatMul."""
    w = RNG.normal(0, 2, (6, 4)).astype(ml_dtypes.float8_e4m3fn)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array([0.5, 0.25, 1.0, 2.0], np.float32), "s_w"),
             numpy_helper.from_array(np.float32(0.5), "s_x"),
             numpy_helper.from_array(np.zeros((), ml_dtypes.float8_e4m3fn), "z_x")]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s_x", "z_x"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "s_w"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["y"]),
    ]
    x = RNG.normal(0, 100, (5, 6)).astype(np.float32)
    x[0, :2] = [1e4, -1e4]  # beyond float8's range once scaled: saturates to +-448
    return make_model(nodes, [("x", x)], ["y"], 21, inits), x


def _ours(model, x, tmp_path):
    """The outputs through the onnx backend, and through a Predictor of the saved file."""
    through_backend = backend.prepare(model, device="cpu").run({"x": x})
    path = os.path.join(tmp_path, "model.onnx")
    onnx.save(model, path)
    through_predictor = Predictor(path, batch_size=x.shape[0], optimize="all").predict(x)
    return through_backend, through_predictor


def _assert_same(got, want, tol):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, f"{g.dtype} vs {w.dtype}"
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32),
                                   rtol=tol, atol=tol)


@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "int32_data"])
def test_a_bfloat16_weights_model_matches_onnxruntime(raw, tmp_path):
    model, x = _bfloat16_model(raw)
    # onnxruntime computes a bfloat16 output but cannot hand it to NumPy ("No corresponding
    # Numpy type"): it is compared cast back to float32 (y_rounded), and as bfloat16 against
    # onnx's reference evaluator
    for_ort = onnx.ModelProto()
    for_ort.CopyFrom(model)
    del for_ort.graph.output[2]
    want = ort_run(for_ort, {"x": x})
    from onnx.reference import ReferenceEvaluator

    reference = ReferenceEvaluator(model).run(None, {"x": x})
    _assert_same(reference[:2], want, 1e-5)
    assert reference[2].dtype == ml_dtypes.bfloat16
    for got in _ours(model, x, tmp_path):
        _assert_same(got, want + reference[2:], 1e-5)
        assert not np.array_equal(got[0], got[1])  # (the rounding happened)


@pytest.mark.parametrize("signed", [True, False], ids=["int4", "uint4"])
def test_an_int4_weight_only_model_matches_onnxruntime(signed, tmp_path):
    model, x = _int4_weight_only_model(signed)
    want = ort_run(model, {"x": x})
    for got in _ours(model, x, tmp_path):
        _assert_same(got, want, 1e-5)


def test_a_float8_qdq_model_matches_onnxruntime(tmp_path):
    model, x = _float8_qdq_model()
    want = ort_run(model, {"x": x})
    from onnx.reference import ReferenceEvaluator

    # (onnxruntime and onnx's reference agree: the comparison checks the model's definition)
    _assert_same(ReferenceEvaluator(model).run(None, {"x": x}), want, 1e-5)
    for got in _ours(model, x, tmp_path):
        _assert_same(got, want, 1e-5)


def _opencl_or_skip():
    import portable as pt

    try:
        pt.opencl(0).backend  # (loading it opens the device and checks its compiler)
    except Exception as exc:  # noqa: BLE001 - no pyopencl or no device
        pytest.skip(f"no OpenCL device: {exc}")


def test_opencl_runs_a_float8_qdq_model():
    # OpenCL holds float8 as bytes and converts with ONNX's rules (backends/opencl/formats.py)
    _opencl_or_skip()
    model, x = _float8_qdq_model()
    _assert_same(backend.prepare(model, device="opencl").run({"x": x}),
                 ort_run(model, {"x": x}), 1e-5)


def test_opencl_runs_an_int4_weight_only_model():
    # the int4 weights stay packed on the device and are unpacked and dequantized per use
    _opencl_or_skip()
    model, x = _int4_weight_only_model(True)
    want = ort_run(model, {"x": x})
    _assert_same(backend.prepare(model, device="opencl").run({"x": x}), want, 1e-4)


def test_portable_imports_without_ml_dtypes_and_names_it_when_needed():
    # ml_dtypes is optional: `import portable` needs NumPy alone, and a model in one of its
    # types is refused with the package named (None in sys.modules makes an import fail).
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import portable, portable.dtypes as d\n"
            "assert 'onnx' not in sys.modules\n"
            "print(d.from_onnx(1))\n"
            "try:\n    d.from_onnx(22)\nexcept Exception as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "float32" in done.stdout and "int4 needs the ml_dtypes package" in done.stdout


def test_packed_tensors_are_written_in_onnxs_layout():
    # the exporter's tensors (exporters/onnx/protos.py) hold 4- and 2-bit values two and four
    # to a byte, first in the low bits, as onnx reads them back
    from exporters.onnx.protos import array_to_tensor

    for dtype, values in ((ml_dtypes.int4, [-8, 7, -1, 0, 3]), (ml_dtypes.uint2, [0, 1, 2, 3, 1]),
                          (ml_dtypes.float4_e2m1fn, [0.5, -6.0, 1.5])):
        array = np.array(values, np.float32).astype(dtype)
        proto = array_to_tensor(array, "t")
        bits = 4 if dtype != ml_dtypes.uint2 else 2
        assert len(proto.raw_data) == -(-array.size * bits // 8)
        back = numpy_helper.to_array(proto)
        assert back.dtype == array.dtype
        np.testing.assert_array_equal(back.astype(np.float32), array.astype(np.float32))
    assert array_to_tensor(np.zeros(3, ml_dtypes.bfloat16), "b").data_type == TensorProto.BFLOAT16


@pytest.mark.parametrize("code", sorted(__import__("portable.dtypes").dtypes.LOW_PRECISION))
@pytest.mark.parametrize("shape", [(3, 5), (7,), (0,), ()], ids=["3x5", "7", "empty", "scalar"])
def test_the_wire_reader_reads_every_low_precision_layout_as_onnx_does(code, shape):
    # raw_data (packed for 4- and 2-bit types, odd counts padded) and the typed field
    # (int32_data: bit patterns, one packed byte per entry for 4- and 2-bit types), read
    # without onnx (portable.io.onnx.wire / reading) and compared with numpy_helper.to_array
    from portable.dtypes import from_onnx, is_integer, type_info
    from portable.io.onnx import reading, wire

    dtype = from_onnx(code)
    values = RNG.uniform(-6, 6, shape).astype(np.float32)
    if is_integer(dtype):  # (in range: the wire holds bits, not saturated values)
        values = np.clip(values, int(type_info(dtype).min), int(type_info(dtype).max))
    array = values.astype(dtype)
    typed = array.astype(np.float32) if code not in (21, 22, 25, 26) else array.astype(np.int32)
    for proto in (numpy_helper.from_array(array, "t"),
                  helper.make_tensor("t", code, shape, typed.ravel().tolist(), raw=False)):
        model = helper.make_model(helper.make_graph([], "g", [], [], initializer=[proto]))
        parsed = wire.parse_model(model.SerializeToString())
        got = reading.tensor_to_array(parsed.graph.initializer[0], "initializer")
        want = numpy_helper.to_array(proto)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.reshape(-1).view(np.uint8) & _mask(code),
                                      want.reshape(-1).view(np.uint8) & _mask(code))


def _mask(code):
    """The bits that hold a value (4- and 2-bit values fill only part of their byte)."""
    return np.uint8({21: 0xF, 22: 0xF, 23: 0xF, 25: 0x3, 26: 0x3}.get(code, 0xFF))


def test_packed_data_of_the_wrong_length_is_refused_naming_the_tensor():
    from portable.errors import SerializationError
    from portable.io.onnx import reading, wire

    proto = numpy_helper.from_array(np.zeros(5, ml_dtypes.int4), "w")  # 3 packed bytes
    proto.raw_data = b"\x00\x00"
    model = helper.make_model(helper.make_graph([], "g", [], [], initializer=[proto]))
    parsed = wire.parse_model(model.SerializeToString())
    with pytest.raises(SerializationError, match=r"initializer 'w'.*2 packed bytes for 5 "
                                                 r"4-bit values \(3 expected\)"):
        reading.tensor_to_array(parsed.graph.initializer[0], "initializer")
