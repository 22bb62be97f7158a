"""A short fuzz run of the ONNX, deployment and tensor-file readers (benchmarks/fuzz_readers.py
with the hypothesis engine, a few seconds per target, in a subprocess so that a crash or a hang
fails the test instead of taking pytest down): every reader must have run on more than 100
mutated inputs, and every failure must be one of portable's exceptions."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("hypothesis", reason="the fallback fuzz engine draws inputs with hypothesis")
pytest.importorskip("onnx", reason="the ONNX seeds are built with the onnx helpers")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_readers_survive_mutated_inputs(tmp_path):
    try:
        done = subprocess.run(
            [sys.executable, os.path.join(ROOT, "benchmarks", "fuzz_readers.py"),
             "--engine", "hypothesis", "--seconds", "4", "--target", "all",
             "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
            env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        pytest.fail("the fuzz run hung (no result within 300 s)")
    assert done.stdout.strip(), f"the fuzz run printed nothing:\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report["targets"]) == {"onnx", "deployment", "tensors"}
    for name, result in report["targets"].items():
        assert result["executions"] > 100, f"{name}: only {result['executions']} inputs ran"
    findings = [f"{f['target']}: {f['exception'] or f['kind']}: {f['message']} at {f['where']} "
                f"(replay: python benchmarks/fuzz_readers.py --replay {f.get('input')} "
                f"--target {f['target']})"
                for result in report["targets"].values() for f in result["findings"]]
    assert report["findings_count"] == 0, "\n".join(findings)
    assert done.returncode == 0
