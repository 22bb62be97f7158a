"""An int8 model in ONNX's QDQ form (quantize the activations, dequantize them and the int8
weights before MatMul and Conv), as onnxruntime's quantization tools write it: portable
imports it and computes what onnxruntime (running the ops as written) and onnx's reference
evaluator compute, at opsets 13 and 21 (per-axis weights), on the CPU and, when there is one,
on an OpenCL device."""
import numpy as np
import pytest

from tests.exporters.helpers import make_model, onnx, tensor

from exporters.onnx import backend

helper = onnx.helper
RNG = np.random.default_rng(0)


def _qdq_model(opset: int):
    w_dense = RNG.integers(-127, 128, (16, 10)).astype(np.int8)
    w_conv = RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s_x", "z_x"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wc", "s_wc"], ["wcd"], axis=0),
        helper.make_node("Conv", ["xd", "wcd"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Concat", ["f", "f", "f", "f"], ["f16"], axis=1),
        helper.make_node("DequantizeLinear", ["wd", "s_wd", "z_wd"], ["wdd"], axis=1),
        helper.make_node("MatMul", ["f16", "wdd"], ["y"]),
    ]
    inits = [tensor("s_x", 0.05), tensor("z_x", 128, np.uint8),
             tensor("wc", w_conv, np.int8), tensor("s_wc", [0.01, 0.02, 0.015, 0.03]),
             tensor("wd", w_dense, np.int8),
             tensor("s_wd", RNG.uniform(0.005, 0.02, 10)),
             tensor("z_wd", np.zeros(10), np.int8)]
    x = RNG.uniform(-3, 3, (2, 3, 8, 8)).astype(np.float32)
    return make_model(nodes, [("x", x)], ["y"], opset, inits), x


def _ort_as_written(model, feeds):
    """onnxruntime running the ops as written: its optimizer would fuse the QDQ pairs into
    integer kernels, which round differently from the model's float definition."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("opset", [13, 21])
def test_a_qdq_int8_model_computes_what_onnxruntime_computes(opset):
    model, x = _qdq_model(opset)
    expected = _ort_as_written(model, {"x": x})[0]
    if opset >= 19:  # (the reference evaluator implements these ops from version 19 on)
        from onnx.reference import ReferenceEvaluator

        reference = ReferenceEvaluator(model).run(None, {"x": x})[0]
        np.testing.assert_allclose(expected, reference, rtol=1e-5, atol=1e-5)
    devices = ["cpu"]
    try:
        import portable as pt

        pt.opencl(0).backend  # (loading it opens the device and checks its compiler)
        devices.append("opencl")
    except Exception:  # noqa: BLE001 - no pyopencl or no device: the CPU only
        pass
    for device in devices:
        got = backend.prepare(model, device=device).run({"x": x})[0]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=device)
