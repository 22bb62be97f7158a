"""``portable predict``: outputs match onnxruntime's in one batch or in runs, the table and the
JSON report, and bad input (over budget, corrupted model, mismatched inputs) exits 2."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from portable.cli.main import main
from portable.data.digits import load_digits_split
from tests.android_demo._lenet import lenet_models
from tests.train._cli import ROOT, env

ROWS = 30


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return lenet_models(tmp_path_factory)


@pytest.fixture(scope="module")
def digits():
    return load_digits_split().x_test[:ROWS]


@pytest.fixture(scope="module")
def expected(models, digits):
    """onnxruntime's outputs on the ONNX file `portable train` exported (batch 1, row by row)."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(models["onnx"]), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: x[None]})[0] for x in digits])


def _predict(capsys, *args):
    code = main(["predict", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured


@pytest.mark.parametrize("fmt", ["portable", "onnx"])
@pytest.mark.parametrize("batch", [None, 1, 10])
def test_outputs_match_onnxruntime_in_one_batch_or_in_runs(models, digits, expected, tmp_path,
                                                           capsys, fmt, batch):
    np.save(tmp_path / "x.npy", digits)
    out = tmp_path / "out.npz"
    extra = ["--batch-size", batch] if batch else []
    code, captured = _predict(capsys, models[fmt], "--inputs", tmp_path / "x.npy", "--outputs",
                              out, "--memory-budget", "64MB", "--json", *extra)
    assert code == 0, captured.err[-3000:]
    report = json.loads(captured.out.strip().splitlines()[-1])
    with np.load(out, allow_pickle=False) as saved:
        (name,) = saved.files
        np.testing.assert_allclose(saved[name], expected, rtol=1e-4, atol=1e-4)
    assert report["runs"] == ROWS // (batch or ROWS) and report["device"] == "cpu(0)"
    (output,) = report["outputs"]
    assert output["name"] == name and output["shape"] == [ROWS, 10]
    assert output["top5"] == np.argsort(-expected, axis=1, kind="stable")[:, :5].tolist()
    memory = report["memory"]
    assert memory["budget_bytes"] == 64 << 20 and 0 < memory["total_bytes"] < 64 << 20
    assert memory["total_bytes"] == (memory["plan_bytes"] + memory["weights_bytes"]
                                     + memory["io_bytes"])
    assert report["peak_resident_bytes"] > 0


def test_table_of_an_npz_by_name(models, digits, expected, tmp_path, capsys):
    np.savez(tmp_path / "x.npz", data=digits[:4])
    code, captured = _predict(capsys, models["portable"], "--inputs", tmp_path / "x.npz")
    assert code == 0, captured.err[-3000:]
    lines = captured.out.splitlines()
    assert lines[0].startswith("lenet.portable on cpu(0): loaded in")
    assert lines[1].startswith("memory: ") and "budget none" in lines[1]
    assert "top-5" in lines[2] and "[4, 10]" in lines[3]
    rows = [line.split("row ", 1)[1] for line in lines[3:] if "row " in line]
    classes = [[int(part.split(":")[0]) for part in row.split(": ", 1)[1].split(", ")]
               for row in rows]
    assert classes == np.argsort(-expected[:4], axis=1, kind="stable")[:, :5].tolist()


def test_over_budget_is_refused_with_the_numbers(models, digits, tmp_path, capsys):
    np.save(tmp_path / "x.npy", digits)
    code, captured = _predict(capsys, models["onnx"], "--inputs", tmp_path / "x.npy",
                              "--memory-budget", "16k")
    assert code == 2 and captured.out == ""
    message = captured.err
    for part in ("lenet.onnx", "plan", "weights", "budget 16.0 KiB", "--batch-size"):
        assert part in message, message


def test_corrupted_model_is_refused(models, digits, tmp_path, capsys):
    data = models["portable"].read_bytes()
    broken = tmp_path / "broken.portable"
    broken.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    np.save(tmp_path / "x.npy", digits)
    code, captured = _predict(capsys, broken, "--inputs", tmp_path / "x.npy")
    assert code == 2 and "broken.portable" in captured.err and "corrupted" in captured.err


@pytest.mark.parametrize("name, content, words", [
    ("wrong.npz", {"pixels": np.zeros((1, 1, 8, 8), np.float32)}, ["missing ['data']",
                                                                   "pixels"]),
    ("shape.npy", np.zeros((2, 1, 9, 9), np.float32), ["'data'", "(2, 1, 9, 9)"]),
    ("rows.npy", np.zeros((5, 1, 8, 8), np.float32), ["5 rows", "--batch-size"]),
    ("garbage.npz", b"not an archive", ["cannot read inputs", "garbage.npz"]),
])
def test_inputs_that_do_not_fit_are_refused(models, tmp_path, capsys, name, content, words):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, dict):
        np.savez(path, **content)
    else:
        np.save(path, content)
    extra = ["--batch-size", 2] if name == "rows.npy" else []
    code, captured = _predict(capsys, models["onnx"], "--inputs", path, *extra)
    assert code == 2, captured.err
    assert all(word in captured.err for word in words), captured.err


def test_predict_command_loads_no_onnx_or_training_packages(models, digits, tmp_path):
    np.save(tmp_path / "x.npy", digits)
    code = (f"import sys; from portable.cli.main import main; "
            f"rc = main(['predict', {str(models['onnx'])!r}, '--inputs', "
            f"{str(tmp_path / 'x.npy')!r}, '--json']); "
            f"import json; print(json.dumps(sorted({{m.partition('.')[0] for m in sys.modules}})))"
            f"; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert not loaded & {"onnx", "onnxruntime", "google", "sklearn", "scipy", "matplotlib",
                         "safetensors", "tqdm", "torch"}
