"""Weights stay as stored: an int8 QDQ model, an int4 weight-only model (blocked
DequantizeLinear) and a float16-weights model keep their weights at the file's size in the
Predictor, are widened per use, and still match onnxruntime."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the models are built with onnx.helper")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")
ml_dtypes = pytest.importorskip("ml_dtypes", reason="int4 weights are an ml_dtypes type")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from portable.predict import Predictor  # noqa: E402

RNG = np.random.default_rng(0)
SIZES = (64, 256, 128, 32)   # input, two hidden layers, output


def _model(initializers, nodes, path):
    graph = helper.make_graph(
        nodes, "stored", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, SIZES[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.save(model, str(path))
    return model


def _mlp(weight, path):
    """Three MatMul layers with ReLU between; ``weight(i, rows, cols)`` gives each layer's
    initializers and nodes producing ``w{i}``."""
    initializers, nodes, h = [], [], "x"
    for i, (rows, cols) in enumerate(zip(SIZES, SIZES[1:])):
        inits, weight_nodes = weight(i, rows, cols)
        initializers += inits
        nodes += weight_nodes
        out = "y" if i == len(SIZES) - 2 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [h, f"w{i}"], [out if out == "y" else f"m{i}"]))
        if out != "y":
            nodes.append(helper.make_node("Relu", [f"m{i}"], [out]))
        h = out
    return _model(initializers, nodes, path)


def _int8(i, rows, cols):
    q = RNG.integers(-127, 128, (rows, cols)).astype(np.int8)
    scale = RNG.uniform(0.001, 0.01, cols).astype(np.float32)
    return ([numpy_helper.from_array(q, f"q{i}"), numpy_helper.from_array(scale, f"s{i}"),
             numpy_helper.from_array(np.zeros(cols, np.int8), f"z{i}")],
            [helper.make_node("DequantizeLinear", [f"q{i}", f"s{i}", f"z{i}"], [f"w{i}"],
                              axis=1)])


def _int4(i, rows, cols, block=16):
    q = RNG.integers(-8, 8, (rows, cols)).astype(ml_dtypes.int4)
    scale = RNG.uniform(0.01, 0.05, (rows // block, cols)).astype(np.float32)
    packed = helper.make_tensor(f"q{i}", TensorProto.INT4, [rows, cols],
                                q.astype(np.int8).reshape(-1).tolist())
    return ([packed, numpy_helper.from_array(scale, f"s{i}")],
            [helper.make_node("DequantizeLinear", [f"q{i}", f"s{i}"], [f"w{i}"], axis=0,
                              block_size=block)])


def _float16(i, rows, cols):
    w = (RNG.standard_normal((rows, cols)) * 0.1).astype(np.float16)
    return ([numpy_helper.from_array(w, f"h16_{i}")],
            [helper.make_node("Cast", [f"h16_{i}"], [f"w{i}"], to=TensorProto.FLOAT)])


def _stored_bytes(model):
    """The weight bytes the file stores (ONNX packs int4 two to a byte)."""
    total = 0
    for tensor in model.graph.initializer:
        count = int(np.prod(tensor.dims))
        if tensor.data_type in (TensorProto.INT4, TensorProto.UINT4):
            total += -(-count // 2)
        else:
            total += numpy_helper.to_array(tensor).nbytes
    return total


@pytest.mark.parametrize("weight", [_int8, _int4, _float16],
                         ids=["int8_qdq", "int4_blocked", "float16_cast"])
def test_weights_stay_as_stored_and_match_onnxruntime(tmp_path, weight):
    path = tmp_path / "model.onnx"
    model = _mlp(weight, path)
    x = RNG.standard_normal((2, SIZES[0])).astype(np.float32)
    # (with its graph optimisations on, onnxruntime fuses DequantizeLinear+MatMul into integer
    # kernels that quantize the activations too, which moves results by about 0.5%: the graph
    # as written is what both runtimes are asked to compute)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    predictor = Predictor(path, batch_size=2)
    got, = predictor.predict(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    stored = _stored_bytes(model)
    held = predictor.memory["weights_bytes"]
    assert 0.9 * stored <= held <= 1.1 * stored, (held, stored)
    # widened to float32 once, at load, they would be twice (float16) to eight times (int4) that
    widened = sum(rows * cols * 4 for rows, cols in zip(SIZES, SIZES[1:]))
    assert widened > 1.8 * stored
