"""Mutation fuzzing: at least 1,000 mutants of valid models (bytes and fields), each imported,
prepared and run; every failure must be one of portable's exceptions. The run happens in a
subprocess with a memory limit and a deadline, so a crash or a hang fails the test instead of
taking pytest down."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("onnx", reason="the fuzzer mutates ONNX models")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_mutated_models_fail_only_with_portable_errors():
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.exporters.fuzz_models", "--seconds", "15",
             "--minimum", "1000", "--seed", "0"], cwd=ROOT, capture_output=True, text=True,
            timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1",
                              "OPENBLAS_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired:
        pytest.fail("the fuzz run hung (no result within 240 s)")
    assert done.returncode == 0, f"the fuzz run crashed:\n{done.stderr[-3000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["mutants"] >= 1000
    assert report["foreign_count"] == 0, "\n----\n".join(report["foreign"])
    assert report["refused"] > 0 and report["ok"] > 0  # the mutants reach both outcomes
