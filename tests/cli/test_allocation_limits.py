"""Every allocation a file or an argument sizes is checked against a limit first (issue 21).

``portable run`` counts random inputs (Python ints) before drawing them and reads ``--inputs``
(.npy or .npz) with the same bounded reader as ``portable predict``; ``predict`` refuses a zip
bomb under its budget before decompressing it; ``memory`` refuses a batch whose plan cannot fit
before measuring it. Where memory is the point the command runs in a subprocess whose address
space is limited to its own baseline (measured on a harmless variant of the same command) plus
``HEADROOM``: it must exit 2 with our message, not die of a MemoryError or be killed.

Models are built with the ``onnx`` package's helper and bombs written by hand
(``tests/io/test_arrays.py``); expected values are closed forms.
"""
from __future__ import annotations

import io
import json
import resource
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pytest

from portable.cli.main import main
from tests.io.test_arrays import zip_bomb
from tests.train._cli import ROOT, env

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

MiB = 1 << 20
# What a refusal may cost above the command's own baseline: far less than any allocation the
# tests provoke (3.4 GiB, 600 MiB, 23 TiB), far more than the baseline's noise.
HEADROOM = 256 * MiB
LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"),
                           reason="RLIMIT_AS and /proc/self/status: Linux")

# Runs `portable ARGS...` and reports the process's peak address space (VmPeak) on stderr.
_WRAPPER = """
import sys
from portable.cli.main import main
code = main(sys.argv[1:])
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmPeak:"))
print(f"VMPEAK {peak}", file=sys.stderr)
sys.exit(code)
"""


def run_limited(args: list, limit: int | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """``portable ARGS`` in a subprocess, its address space limited to ``limit`` bytes."""
    def restrict() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([sys.executable, "-c", _WRAPPER, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env(),
                          preexec_fn=restrict if limit else None)


def vm_peak(proc: subprocess.CompletedProcess) -> int:
    """The peak address space a ``run_limited`` process reported."""
    line = next(line for line in proc.stderr.splitlines() if line.startswith("VMPEAK "))
    return int(line.split()[1])


def _limited_refusal(harmless: list, hostile: list) -> subprocess.CompletedProcess:
    """Run ``harmless`` to measure the baseline, then ``hostile`` within baseline + HEADROOM;
    the hostile run must exit 2 with one line of ours, no traceback."""
    baseline = run_limited(harmless)
    assert baseline.returncode == 0, baseline.stderr[-3000:]
    proc = run_limited(hostile, limit=vm_peak(baseline) + HEADROOM)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    return proc


def _model(path, inputs: dict, op: str = "Relu", **attrs) -> str:
    """One float32 node ``op`` over ``inputs`` (name -> shape), output ``y``."""
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), ["y"], **attrs)], "m",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return str(path)


def _main(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


# -- portable run: random inputs are counted before they are drawn -----------------------------


@LINUX
def test_run_refuses_a_tiny_model_declaring_a_huge_input_within_its_baseline(tmp_path):
    small = _model(tmp_path / "small.onnx", {"x": [2, 2]}, "ReduceSum", keepdims=0)
    big = _model(tmp_path / "big.onnx", {"x": [30000, 30000]}, "ReduceSum", keepdims=0)
    assert (tmp_path / "big.onnx").stat().st_size < 100
    proc = _limited_refusal(["run", small, "--repeat", 0], ["run", big, "--repeat", 0])
    for part in ("'x'", "(30000, 30000)", "float32", "3.4 GiB", "limit of 1.0 GiB",
                 "--memory-budget"):
        assert part in proc.stderr, proc.stderr


def test_random_inputs_are_counted_exactly_and_held_to_the_budget(tmp_path):
    path = _model(tmp_path / "two.onnx", {"a": [8, 4], "b": [8, 4]}, "Add")
    code, out, err = _main("run", path, "--memory-budget", "256", "--repeat", 0, "--json")
    assert code == 0, err  # 2 * 8 * 4 * 4 = 256 bytes: exactly the budget
    assert json.loads(out)["inputs"]["a"] == {"shape": [8, 4], "dtype": "float32"}
    code, _, err = _main("run", path, "--memory-budget", "255")
    assert code == 2 and "random input 'b' of shape (8, 4)" in err and "255 B" in err, err
    huge = _model(tmp_path / "huge.onnx", {"x": [None, 1 << 20]})
    code, _, err = _main("run", huge, "--batch", 1 << 42)  # 2**64 bytes: 0 in int64
    assert code == 2 and f"({1 << 42}, {1 << 20})" in err, err
    assert f"{2 ** 64 / 2 ** 40:.1f} TiB" in err, err


# -- portable run: --inputs through the shared bounded reader ----------------------------------


@pytest.mark.parametrize("suffix", ["npy", "npz"])
def test_run_reads_an_npy_or_npz_and_computes_relu(tmp_path, suffix):
    path = _model(tmp_path / "relu.onnx", {"x": [3, 4]})
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    inputs = tmp_path / f"x.{suffix}"
    np.save(inputs, x) if suffix == "npy" else np.savez(inputs, x=x)
    code, out, err = _main("run", path, "--inputs", inputs, "--outputs", tmp_path / "y.npz",
                           "--repeat", 0, "--json")
    assert code == 0, err
    with np.load(tmp_path / "y.npz", allow_pickle=False) as saved:
        np.testing.assert_array_equal(saved["y"], np.maximum(x, 0))
    summary = json.loads(out)["outputs"]["y"]  # relu of 12 points evenly spaced over [-1, 1]
    assert summary["min"] == 0 and summary["max"] == 1 and summary["nonfinite"] == 0
    assert summary["mean"] == pytest.approx(sum(max(-1 + 2 * i / 11, 0) for i in range(12)) / 12)


def test_run_refuses_an_npy_for_a_two_input_model_and_an_over_budget_file(tmp_path):
    path = _model(tmp_path / "two.onnx", {"a": [2], "b": [2]}, "Add")
    np.save(tmp_path / "x.npy", np.ones(2, np.float32))
    code, _, err = _main("run", path, "--inputs", tmp_path / "x.npy")
    assert code == 2 and "one array but the model has 2 inputs" in err, err
    np.savez(tmp_path / "ab.npz", a=np.ones(2, np.float32), b=np.ones(2, np.float32))
    code, _, err = _main("run", path, "--inputs", tmp_path / "ab.npz", "--memory-budget", "15")
    assert code == 2 and "member 'b.npy'" in err and "--memory-budget" in err, err


# -- portable predict: a zip bomb under the budget ----------------------------------------------


@LINUX
def test_predict_refuses_a_zip_bomb_under_its_budget_within_its_baseline(tmp_path):
    model = _model(tmp_path / "relu.onnx", {"x": [None, 4]})
    zip_bomb(tmp_path / "bomb.npz")  # 600 MiB of float32 zeros in < 1 MiB
    np.savez(tmp_path / "fine.npz", x=np.ones((2, 4), np.float32))
    budget = ["--memory-budget", "16MB"]
    proc = _limited_refusal(["predict", model, "--inputs", tmp_path / "fine.npz", *budget],
                            ["predict", model, "--inputs", tmp_path / "bomb.npz", *budget])
    for part in ("bomb.npz", "600.0 MiB", "16.0 MiB", "nothing was decompressed"):
        assert part in proc.stderr, proc.stderr


def test_predict_lists_top_classes_of_a_bounded_number_of_rows(tmp_path):
    from portable.cli.predict import TOP_ROWS

    model = _model(tmp_path / "relu.onnx", {"x": [None, 6]})
    rows = TOP_ROWS + 7
    x = np.tile(np.arange(6, dtype=np.float32), (rows, 1))
    np.save(tmp_path / "x.npy", x)
    code, out, err = _main("predict", model, "--inputs", tmp_path / "x.npy", "--json")
    assert code == 0, err
    (output,) = json.loads(out)["outputs"]
    assert output["shape"] == [rows, 6] and output["top5_rows_omitted"] == 7
    assert output["top5"] == [[5, 4, 3, 2, 1]] * TOP_ROWS


def test_predict_refuses_runs_whose_joined_outputs_exceed_the_budget(tmp_path):
    model = tmp_path / "tile.onnx"  # each row of 4 floats becomes 65536 rows: 1 MiB out
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "reps"], ["y"])], "tile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[helper.make_tensor("reps", TensorProto.INT64, [2], [1, 65536])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(model))
    np.save(tmp_path / "x.npy", np.ones((64, 4), np.float32))
    code, _, err = _main("predict", model, "--inputs", tmp_path / "x.npy", "--batch-size", 1,
                         "--memory-budget", "16MB")
    assert code == 2 and "64 runs of 1.0 MiB of outputs each" in err and "128.0 MiB" in err, err


# -- portable memory: --batch ------------------------------------------------------------------


def test_memory_refuses_a_batch_that_is_not_an_integer_while_parsing():
    proc = subprocess.run([sys.executable, "-m", "portable.cli.main", "memory", "mlp",
                           "--batch", "1e11"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env())
    assert proc.returncode == 2 and "not an integer: '1e11'" in proc.stderr, proc.stderr


@LINUX
def test_memory_refuses_a_huge_batch_before_measuring_within_its_baseline():
    proc = _limited_refusal(["memory", "mlp", "--batch", 8],
                            ["memory", "mlp", "--batch", 10 ** 11])
    for part in ("mlp at batch 100000000000", "predicts a peak", "nothing was run",
                 "--no-measure"):
        assert part in proc.stderr, proc.stderr


def test_memory_plans_a_huge_batch_with_no_measure_and_refuses_it_under_a_budget():
    code, out, err = _main("memory", "mlp", "--batch", 10 ** 11, "--no-measure", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["inputs_bytes"] == 10 ** 11 * 64 * 4  # a batch of 8x8 float32 digits
    code, _, err = _main("memory", "mlp", "--batch", 8, "--memory-budget", "1k")
    assert code == 2 and "more than 1.0 KiB (--memory-budget)" in err, err
