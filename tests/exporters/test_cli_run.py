"""``portable run MODEL.onnx``: given or random inputs, outputs to .npz, timings, errors."""
import io
import json
from contextlib import redirect_stderr, redirect_stdout

import numpy as np

from tests.exporters.helpers import make_model, onnx, tensor

from portable.cli.main import main

helper = onnx.helper


def _model(path):
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                        helper.make_node("Relu", ["h"], ["y"])],
                       [("x", np.ones((2, 4), np.float32))], ["y"], 17, [tensor("w", w)])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, str(path))
    return w


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_run_with_inputs_and_outputs(tmp_path):
    w = _model(tmp_path / "m.onnx")
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code, out, _ = _run(["run", str(tmp_path / "m.onnx"), "--inputs", str(tmp_path / "in.npz"),
                         "--outputs", str(tmp_path / "out.npz"), "--json", "--repeat", "2"])
    assert code == 0
    report = json.loads(out)
    assert report["outputs"]["y"]["shape"] == [5, 3] and report["runs"] == 2
    with np.load(tmp_path / "out.npz") as saved:
        np.testing.assert_allclose(saved["y"], np.maximum(x @ w, 0), rtol=1e-6)


def test_run_with_random_inputs(tmp_path):
    _model(tmp_path / "m.onnx")
    code, out, _ = _run(["run", str(tmp_path / "m.onnx"), "--batch", "3"])
    assert code == 0 and "random inputs" in out and "y: float32[3, 3]" in out


def test_run_reports_bad_files(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    code, _, err = _run(["run", str(tmp_path / "bad.onnx")])
    assert code == 2 and "bad.onnx" in err
    _model(tmp_path / "m.onnx")
    np.savez(tmp_path / "in.npz", x=np.ones((2, 7), np.float32))
    code, _, err = _run(["run", str(tmp_path / "m.onnx"), "--inputs",
                         str(tmp_path / "in.npz")])
    assert code == 2 and "shape" in err
