"""The onnx.backend interface: onnx's own BackendTest runner drives it over the model tests
stored in the onnx package (PyTorch-converted modules, PyTorch operators, simple models), and
the module-level functions behave as the interface specifies."""
import unittest

import numpy as np
import pytest

from tests.exporters.helpers import make_model, onnx

from portable.device import as_device
from portable.errors import BindError, PortableError

import exporters.onnx.backend as backend

helper = onnx.helper

# Stored model tests portable cannot run, each with the reason.
UNSUPPORTED = {
    r"test_gradient_of": "the ai.onnx.preview.training Gradient op is not implemented",
    r"test_sequence_model": "sequence types and ops are not implemented",
    r"test_strnorm_model": "string tensors are not a portable element type",
    r"test_shrink": "Shrink is not implemented",
    r"test_sign_model": "Sign is not implemented",
    r"test_(operator_)?selu|test_SELU": "Selu is not implemented",
    r"test_operator_symbolic_override": "InstanceNormalization is not implemented",
}


def test_onnx_backend_test_runner_drives_the_backend(tmp_path, monkeypatch):
    import onnx.backend.test.runner as runner

    monkeypatch.setenv("ONNX_HOME", str(tmp_path))
    stored = runner.load_model_tests
    # Node cases are generated (slowly) and run by test_conformance.py; the light model-zoo
    # nets by test_light_models.py: this run covers the other stored model tests.
    monkeypatch.setattr(runner, "load_model_tests", lambda data_dir=None, kind=None:
                        [] if kind in ("node", "real") else stored(kind=kind))
    suite_runner = onnx.backend.test.BackendTest(backend, __name__)
    suite_runner.exclude(r"_cuda$")
    for pattern in UNSUPPORTED:
        suite_runner.exclude(pattern)
    suite = unittest.TestSuite()
    for case in suite_runner.test_cases.values():
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))
    result = unittest.TestResult()
    suite.run(result)
    problems = [f"{test.id()}: {trace.strip().splitlines()[-1]}"
                for test, trace in result.failures + result.errors]
    assert not problems, "\n".join(problems)
    assert result.testsRun - len(result.skipped) >= 100


def test_supports_device():
    assert backend.supports_device("CPU")
    for name in ("CUDA", "OPENCL"):
        try:
            as_device(name.lower()).backend
            loads = True
        except PortableError:
            loads = False
        assert backend.supports_device(name) == loads
    assert not backend.supports_device("TPU")


def test_run_node_and_run_model():
    x = np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32)
    (y,) = backend.run_node(helper.make_node("Relu", ["x"], ["y"]), [x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"])], [("a", x), ("b", x)],
                       ["y"], 17)
    outputs = backend.run_model(model, [x, x])
    np.testing.assert_array_equal(outputs[0], 2 * x)
    np.testing.assert_array_equal(outputs["y"], 2 * x)  # by output name too
    rep = backend.prepare(model.SerializeToString())
    np.testing.assert_array_equal(rep.run({"a": x, "b": -x})[0], np.zeros_like(x))
    with pytest.raises(BindError, match="takes 2"):
        rep.run([x])
    with pytest.raises(BindError, match="unknown input"):
        rep.run({"a": x, "c": x})


def test_shape_inputs_are_planned_with_their_values():
    """A Reshape target fed at run time: each value gets its own plan."""
    x = np.arange(12, dtype=np.float32)
    model = make_model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                       [("x", x), ("shape", np.array([3, 4], np.int64))], ["y"], 17)
    rep = backend.prepare(model)
    assert rep.run([x, np.array([3, 4], np.int64)])[0].shape == (3, 4)
    assert rep.run([x, np.array([2, -1], np.int64)])[0].shape == (2, 6)
    np.testing.assert_array_equal(rep.run([x, np.array([4, 3], np.int64)])[0],
                                  x.reshape(4, 3))


def test_resize_scales_given_at_run_time_are_planned_with_their_values():
    """Resize's scales and roi decide the output shape (``shape_inputs``): fed as graph
    inputs, each new value gets a plan of its own; every result matches onnxruntime."""
    from tests.exporters.helpers import ort_run

    x = np.random.default_rng(0).normal(size=(1, 1, 3, 4)).astype(np.float32)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    model = make_model([onnx.helper.make_node("Resize", ["x", "", "scales"], ["y"],
                                              mode="linear")],
                       [("x", x), ("scales", scales)], ["y"], 19)
    rep = backend.prepare(model)
    for given in (scales, np.array([1, 1, 0.7, 2.5], np.float32), scales):
        got = rep.run({"x": x, "scales": given})[0]
        expected = ort_run(model, {"x": x, "scales": given})[0]
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert len(rep._plans) == 2


def test_repeated_calls_on_one_shape_give_fresh_results_and_keep_every_check():
    """A second call with the same input shapes skips the general input checks and the plan
    lookup (``PortableRep._repeat``): each result must still be computed from its own
    inputs, outputs stay the caller's, and any input that differs from the last call in
    form, name, shape, dtype or layout is checked as on a first call."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "repeat", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 4])],
        [onnx.numpy_helper.from_array(w, "w")])
    rep = backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))

    def expected(x):
        return np.maximum(x.astype(np.float64) @ w, 0)

    first_x = rng.normal(size=(2, 3)).astype(np.float32)
    first = rep.run({"x": first_x})[0]
    for x in (rng.normal(size=(2, 3)).astype(np.float32),  # same shape, new values
              rng.normal(size=(5, 3)).astype(np.float32),  # a new shape: a new plan
              np.asfortranarray(rng.normal(size=(5, 3)).astype(np.float32))):
        for given in ({"x": x}, [x], x):
            np.testing.assert_allclose(rep.run(given)[0], expected(x), rtol=1e-5, atol=1e-6)
    # the first result is the caller's copy: later runs did not overwrite it
    np.testing.assert_allclose(first, expected(first_x), rtol=1e-5, atol=1e-6)
    x = rng.normal(size=(5, 3)).astype(np.float32)
    rep.run({"x": x})
    with pytest.raises(BindError, match="dtype float64"):
        rep.run({"x": x.astype(np.float64)})
    with pytest.raises(BindError, match="shape"):
        rep.run({"x": x[:, :2].copy()})
    with pytest.raises(BindError, match="unknown input"):
        rep.run({"z": x})
    with pytest.raises(BindError, match="takes 1"):
        rep.run([x, x])
