"""``--outputs`` never replaces an input: the model file or the inputs file, however the path
is spelled or linked, and never a folder; the refusal comes before anything runs."""
from __future__ import annotations

import pathlib
import shutil

import numpy as np
import pytest

from portable.cli.main import main

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "exporters" / "data" / "torch"


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "mlp.onnx"
    shutil.copy(FIXTURES / "mlp.onnx", path)
    recorded = np.load(FIXTURES / "mlp.npz")  # PyTorch's input and output
    np.save(tmp_path / "x.npy", recorded["x"])
    return path, tmp_path / "x.npy", recorded["y"]


@pytest.mark.parametrize("command", ["predict", "run"])
def test_outputs_over_an_input_are_refused_and_the_input_kept(model, capsys, command):
    path, inputs, _ = model
    original = path.read_bytes(), inputs.read_bytes()
    link = path.parent / "link.onnx"
    link.symlink_to(path)
    spellings = [str(path), str(path.parent / "." / path.name), str(link), str(inputs)]
    for target in spellings:
        argv = [command, str(path), "--inputs", str(inputs), "--outputs", target]
        if command == "run":
            argv = [command, str(path), "--outputs", target]
            if target == str(inputs):
                argv += ["--inputs", str(inputs)]
        assert main(argv) == 2, target
        assert "would replace it" in capsys.readouterr().err
    assert (path.read_bytes(), inputs.read_bytes()) == original
    assert main([command, str(path), "--outputs", str(path.parent)] +
                (["--inputs", str(inputs)] if command == "predict" else [])) == 2
    assert "is a folder" in capsys.readouterr().err


def test_outputs_elsewhere_hold_what_pytorch_computed(model):
    path, inputs, expected = model
    out = path.parent / "out.npz"
    assert main(["predict", str(path), "--inputs", str(inputs), "--outputs", str(out)]) == 0
    with np.load(out) as saved:
        np.testing.assert_allclose(saved[saved.files[0]], expected, rtol=1e-4, atol=1e-5)
