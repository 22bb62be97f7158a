"""Shared helpers of the ONNX tests: onnxruntime as the reference, small model builders."""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX tests need the onnx package")
from onnx import TensorProto, helper  # noqa: E402


def ort_run(model: Any, feeds: dict) -> list[np.ndarray]:
    """Outputs of onnxruntime (the reference runtime) on ``model`` (ModelProto, bytes, path)."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference runtime")
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    elif isinstance(model, (str, os.PathLike)):
        model = os.fspath(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def make_model(nodes: Sequence[Any], inputs: Sequence[tuple[str, np.ndarray]],
               outputs: Sequence[str], opset: int, initializers: Sequence[Any] = (),
               ir_version: int | None = None) -> onnx.ModelProto:
    """A model whose inputs are typed like the given arrays; outputs untyped."""
    infos = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype),
                                           a.shape) for name, a in inputs]
    graph = helper.make_graph(list(nodes), "test", infos,
                              [helper.make_empty_tensor_value_info(o) for o in outputs],
                              list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version or min(helper.find_min_ir_version_for(model.opset_import), 10)
    return model


def tensor(name: str, values: Any, dtype: Any = np.float32) -> TensorProto:
    return onnx.numpy_helper.from_array(np.asarray(values, dtype), name)


def light_models() -> list[str]:
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".onnx"))


def light_input(model: onnx.ModelProto) -> tuple[str, np.ndarray]:
    """The input onnx's backend test feeds the light models: arange(n) / n in the input's
    shape (symbolic dims 1), as ``Runner.generate_dummy_data`` writes it."""
    init = {t.name for t in model.graph.initializer}
    info = next(i for i in model.graph.input if i.name not in init)
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                  for d in info.type.tensor_type.shape.dim)
    count = int(np.prod(shape))
    return info.name, (np.arange(count).reshape(shape) / count).astype(np.float32)


def with_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of a light model with random weights: each ConstantOfShape that fills a weight
    with one value (the light models ship their shapes only) becomes a random initializer,
    He-normal for a Conv or Gemm weight, uniform in [0.5, 1.5] for a vector (biases, and
    BatchNorm's scales and variances, which must be positive). With one value everywhere
    every channel of a layer is the same, so a channel put in the wrong place goes unseen."""
    rng = np.random.default_rng(seed)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    shapes = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    kept = []
    for node in graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in shapes:
            kept.append(node)
            continue
        shape = tuple(int(d) for d in shapes[node.input[0]])
        if len(shape) >= 2:
            value = rng.standard_normal(shape) * np.sqrt(2 / np.prod(shape[1:]))
        else:
            value = rng.uniform(0.5, 1.5, shape)
        graph.initializer.append(tensor(node.output[0], value))
    del graph.node[:]
    graph.node.extend(kept)
    return copy


def with_logits(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the input of its final Softmax (the logits) as a second output; the
    model itself when it does not end with a Softmax."""
    last = model.graph.node[-1]
    if last.op_type != "Softmax":
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.output.append(helper.make_empty_tensor_value_info(last.input[0]))
    return copy


def rounding_decides(logits: np.ndarray) -> bool:
    """Whether a Softmax over ``logits`` is decided by rounding alone: the logits lie within a
    few float32 steps of each other (squeezenet's constant 0.02 weights make every class's
    logit the same 9.5e9 on onnx's test input, where one step is 1024), so which classes win
    depends on the summation order of one GEMM, the BLAS kernel and its thread count."""
    logits = np.asarray(logits, np.float32)
    return float(np.ptp(logits)) <= 8 * float(np.spacing(np.abs(logits).max()))


def assert_light_outputs(got: Sequence[np.ndarray], want: Sequence[np.ndarray],
                         rtol: float, atol: float) -> None:
    """Outputs of ``with_logits(model)`` against the reference's: where rounding decides the
    softmax, the logits (to ``rtol``: through a deep net they carry more rounding than the
    softmax would), else the output itself."""
    if len(want) > 1 and rounding_decides(want[1]):
        np.testing.assert_allclose(got[1], want[1], rtol=rtol, atol=0)
    else:
        np.testing.assert_allclose(got[0], want[0], rtol=rtol, atol=atol)
