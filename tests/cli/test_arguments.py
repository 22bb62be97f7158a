"""Numbers and sizes on the command line are checked while parsing: a value no command can use
is refused with argparse's exit status 2 and a sentence naming the option, before any work
(no training into a folder, no NaN in a JSON summary, no division by a zero batch)."""
from __future__ import annotations

import pytest

from portable.cli.arguments import (byte_size, nonnegative_float, nonnegative_int,
                                    positive_float, positive_int)
from portable.cli.main import main

REFUSED = [
    (["train", "--epochs", "-2"], "--epochs: must be a positive integer"),
    (["train", "--epochs", "0"], "--epochs: must be a positive integer"),
    (["train", "--lr", "nan"], "--lr: must be a finite number"),
    (["train", "--lr", "-0.1"], "--lr: must be a positive number"),
    (["train", "--lr", "inf"], "--lr: must be a finite number"),
    (["train", "--batch-size", "0"], "--batch-size: must be a positive integer"),
    (["train", "--wd=-1e-4"], "--wd: must be 0 or more"),
    (["train", "--seed", "-1"], "--seed: must be 0 or more"),
    (["train", "--keep", "0"], "--keep: must be a positive integer"),
    (["digits", "--epochs", "1.5"], "--epochs: not an integer"),
    (["predict", "m.onnx", "--inputs", "x.npz", "--batch-size", "0"],
     "--batch-size: must be a positive integer"),
    (["predict", "m.onnx", "--inputs", "x.npz", "--memory-budget", "1e400"],
     "--memory-budget: a byte size must be at most"),
    (["predict", "m.onnx", "--inputs", "x.npz", "--memory-budget", "lots"],
     "--memory-budget: not a byte size"),
    (["run", "m.onnx", "--batch", "0"], "--batch: must be a positive integer"),
    (["memory", "lenet", "--batch", "-3"], "--batch: must be a positive integer"),
    (["launch", "-n", "0", "--", "python", "x.py"], "--workers: must be a positive integer"),
    (["launch", "-n", "2", "--timeout", "nan", "--", "python", "x.py"],
     "--timeout: must be a finite number"),
    (["conformance", "--jobs", "0"], "--jobs: must be a positive integer"),
    (["export", "m.onnx", "-o", "m.portable", "--opset", "-1"],
     "--opset: must be a positive integer"),
]


@pytest.mark.parametrize("argv, message", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_unusable_values_are_refused_while_parsing(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing was written


def test_launch_without_a_program_is_an_error_not_help(capsys):
    assert main(["launch", "-n", "2"]) == 2
    assert "no program given" in capsys.readouterr().err


def test_the_types_accept_what_they_should():
    assert positive_int("3") == 3 and nonnegative_int("0") == 0
    assert positive_float("1e-3") == pytest.approx(1e-3) and nonnegative_float("0") == 0.0
    assert byte_size("1.5GiB") == 3 << 29 and byte_size("64MB") == 64 << 20
