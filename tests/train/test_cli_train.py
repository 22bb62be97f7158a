"""``portable train``: the README's main job end to end (default settings reach >= 97% on
digits), its output files, ONNX export, and clear errors."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from portable.cli.main import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _train(capsys, *args):
    code = main(["train", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("model", ["mlp", "lenet"])
def test_default_settings_reach_97_percent_on_digits(tmp_path, capsys, model):
    code, captured = _train(capsys, "--model", model, "--json", "--no-progress",
                            "--out", tmp_path)
    assert code == 0, captured.err[-2000:]
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["test_accuracy"] >= 0.97, summary
    assert summary["model"] == model and summary["dataset"] == "digits"
    assert summary["epochs"] >= 1 and summary["seconds"] > 0
    paths = summary["paths"]
    width, height = _png_size(tmp_path / "training.png")
    assert paths["plot"] == str(tmp_path / "training.png") and width > 300 and height > 200
    history = json.loads((tmp_path / "history.json").read_text())
    assert len(history) == summary["epochs"]
    assert (tmp_path / "checkpoints").is_dir() and paths["checkpoint"].endswith(".json")
    if model == "mlp":  # the saved parameters reproduce the reported accuracy
        _check_saved_parameters(tmp_path / "model.params.safetensors",
                                summary["test_accuracy"])


def _check_saved_parameters(path, accuracy):
    import portable as pt
    from portable.data.vision import load_arrays
    from portable.models.zoo import get_model

    split = load_arrays("digits")
    net = get_model("mlp")
    net.load_parameters(str(path))
    scores = net(pt.nd.array(split.x_test)).asnumpy()
    assert np.mean(scores.argmax(1) == split.y_test) == pytest.approx(accuracy)


def test_export_to_onnx_predicts_like_the_trained_model(tmp_path, capsys):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    pytest.importorskip("exporters.onnx", reason="the ONNX exporter is not installed")
    onnx_path = tmp_path / "lenet.onnx"
    code, captured = _train(capsys, "--model", "lenet", "--epochs", "2", "--json",
                            "--no-progress", "--out", tmp_path, "--export", onnx_path)
    assert code == 0, captured.err[-2000:]
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["paths"]["onnx"] == str(onnx_path)
    from portable.data.vision import load_arrays

    split = load_arrays("digits")
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    # the batch axis is symbolic: the whole test set in one call, or one sample at a time
    predictions = session.run(None, {name: split.x_test})[0].argmax(1)
    one_by_one = [session.run(None, {name: split.x_test[i:i + 1]})[0].argmax()
                  for i in range(0, len(split.y_test), 50)]
    assert list(predictions[::50]) == one_by_one
    assert np.mean(predictions == split.y_test) == pytest.approx(
        summary["test_accuracy"], abs=1.5 / len(split.y_test))


def test_missing_mnist_files_give_a_clear_error(tmp_path, capsys):
    code, captured = _train(capsys, "--dataset", "mnist", "--data-dir", tmp_path,
                            "--out", tmp_path / "out")
    assert code == 2
    assert "train-images-idx3-ubyte" in captured.err and str(tmp_path) in captured.err


def test_bad_device_is_refused(tmp_path, capsys):
    code, captured = _train(capsys, "--device", "null", "--out", tmp_path)
    assert code == 2 and "--device" in captured.err


def test_trains_on_mnist_idx_files(tmp_path, capsys):
    from tests.data.test_vision import _write_mnist

    _write_mnist(tmp_path / "mnist", n_train=64, n_test=16)
    code, captured = _train(capsys, "--dataset", "mnist", "--data-dir", tmp_path / "mnist",
                            "--model", "mlp", "--epochs", "1", "--batch-size", "16", "--json",
                            "--no-progress", "--out", tmp_path / "out")
    assert code == 0, captured.err[-2000:]
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["dataset"] == "mnist" and summary["steps"] == 4
    assert 0.0 <= summary["test_accuracy"] <= 1.0
