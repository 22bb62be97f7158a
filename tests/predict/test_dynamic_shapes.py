"""The Predictor with symbolic dims (any dim, not only the batch) and with ops whose output
shapes depend on values: plans per shape signature (bounded, least recently used), a declared
maximum held against the memory budget before anything runs. Expected values from NumPy."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from portable.errors import BindError, MemoryBudgetError
from portable.predict import Predictor

WIDTH = 8


def _attention_model(path) -> np.ndarray:
    """y = softmax(x W x^T / sqrt(d)) x over a symbolic batch and sequence length."""
    w = np.random.default_rng(0).normal(size=(WIDTH, WIDTH)).astype(np.float32) / 4
    nodes = [helper.make_node("MatMul", ["x", "w"], ["q"]),
             helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "xt"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "x"], ["y"])]
    graph = helper.make_graph(
        nodes, "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", WIDTH])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    return w


def _expected(x, w):
    scores = (x @ w) @ x.transpose(0, 2, 1)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ x


def test_any_symbolic_dim_is_planned_per_call_and_cached(tmp_path):
    path = str(tmp_path / "attention.onnx")
    w = _attention_model(path)
    predictor = Predictor(path, batch_size=None, plans_kept=2)
    rng = np.random.default_rng(1)
    for batch, seq in [(1, 3), (2, 7), (1, 3), (1, 5)]:
        x = rng.normal(size=(batch, seq, WIDTH)).astype(np.float32)
        y, = predictor.predict(x)
        np.testing.assert_allclose(y, _expected(x, w), rtol=1e-4, atol=1e-5)
    assert predictor.plans_made == 3  # (1, 3) came back from the cache
    assert predictor.memory["plans"] == 2  # bounded: the least recently used was dropped
    # a dropped shape is planned again
    predictor.predict(rng.normal(size=(2, 7, WIDTH)).astype(np.float32))
    assert predictor.plans_made == 4


def test_a_fixed_batch_leaves_the_sequence_symbolic(tmp_path):
    path = str(tmp_path / "attention.onnx")
    w = _attention_model(path)
    predictor = Predictor(path, batch_size=2)
    x = np.random.default_rng(2).normal(size=(2, 4, WIDTH)).astype(np.float32)
    np.testing.assert_allclose(predictor.predict(x)[0], _expected(x, w), rtol=1e-4, atol=1e-5)
    with pytest.raises(BindError, match="'x'"):
        predictor.predict(np.zeros((3, 4, WIDTH), np.float32))


def test_max_shapes_are_held_against_the_budget_before_running(tmp_path):
    path = str(tmp_path / "attention.onnx")
    _attention_model(path)
    # (1, 512): scores alone are 512 * 512 * 4 bytes = 1 MiB
    with pytest.raises(MemoryBudgetError, match="attention.onnx"):
        Predictor(path, batch_size=None, memory_budget="256KiB",
                  max_shapes={"x": (1, 512, WIDTH)})
    predictor = Predictor(path, batch_size=None, memory_budget="64MiB",
                          max_shapes={"x": (1, 512, WIDTH)})
    assert predictor.plans_made == 1 and predictor.memory["total_bytes"] <= 64 << 20
    assert predictor.memory["plan_bytes"] >= 512 * 512 * 4
    predictor.predict(np.zeros((1, 16, WIDTH), np.float32))
    with pytest.raises(BindError, match="larger than its declared maximum"):
        predictor.predict(np.zeros((1, 513, WIDTH), np.float32))


def test_bad_max_shapes_are_refused_by_name(tmp_path):
    path = str(tmp_path / "attention.onnx")
    _attention_model(path)
    with pytest.raises(BindError, match="'y', which is not an input"):
        Predictor(path, batch_size=None, max_shapes={"y": (1, 4, WIDTH)})
    with pytest.raises(BindError, match="does not fit input 'x'"):
        Predictor(path, batch_size=None, max_shapes={"x": (1, 4, WIDTH + 1)})


def test_run_time_tensors_are_reported(tmp_path):
    nodes = [helper.make_node("Greater", ["x", "zero"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["where"]),
             helper.make_node("Transpose", ["where"], ["rows"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "rows"], ["picked"]),
             helper.make_node("Relu", ["x"], ["r"])]
    graph = helper.make_graph(
        nodes, "positives", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("picked", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.zeros((), np.float32), "zero")])
    path = str(tmp_path / "positives.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    predictor = Predictor(path, batch_size=2)
    x = np.array([[1, -2, 3], [-4, 5, 0]], np.float32)
    picked, r = predictor.predict(x)
    np.testing.assert_array_equal(picked, x[x > 0])
    np.testing.assert_array_equal(r, np.maximum(x, 0))
    tensors = predictor.tensors()
    assert tensors["runtime"] == ["where"]
    assert "mask" in tensors["planned"] and "picked" in tensors["planned_per_shape"]
    assert predictor.memory["runtime_tensors"] == ["where"]
