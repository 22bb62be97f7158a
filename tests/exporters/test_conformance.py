"""ONNX node conformance on the CPU: at least 95% of the core cases (the ops portable declares)
pass; the runner isolates cases (a hanging or dying worker costs one case, not the run)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("onnx", reason="the conformance cases come from the onnx package")

from exporters.onnx import conformance  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Declared ops that onnx 1.23 ships no node case of their own for (random draws cannot have
# expected outputs; GlobalLpPool and MaxRoiPool have none; the sequence ops appear only inside
# other ops' cases: SequenceMap's expanded ones, Loop's and If's sequence cases): the op table
# checks them (tests/ops). Kept exact, so that a new onnx release adding cases is noticed.
NO_NODE_CASES = {"GlobalLpPool", "MaxRoiPool", "Multinomial", "RandomNormal", "RandomNormalLike",
                 "RandomUniform", "RandomUniformLike", "ConcatFromSequence", "Optional",
                 "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
                 "SequenceLength"}


def test_core_node_cases_pass_on_cpu():
    report = conformance.run_conformance("core", "cpu", jobs=2)
    failing = [f"{e['status']} {e['name']}: {e['detail'][:200]}" for e in report["results"]
               if e["status"] not in ("pass", "excluded")]
    assert report["counted"] >= 500, report["counted"]
    assert report["pass_rate"] >= 0.95, "\n".join(failing)
    # every declared ONNX op has cases, and every excluded case says why
    assert conformance.core_ops() - {"Constant"} - set(report["by_op"]) == NO_NODE_CASES
    assert all(e["detail"] for e in report["results"] if e["status"] == "excluded")


def test_exclude_list_gives_reasons():
    assert conformance.EXCLUDED and all(reason.strip()
                                        for reason in conformance.EXCLUDED.values())
    assert all(conformance.excluded_reason(name) for name in conformance.EXCLUDED
               if not any(c in name for c in "*?["))
    assert conformance.excluded_reason("test_cast_FLOAT_to_BFLOAT16") is None  # (ml_dtypes)
    assert conformance.excluded_reason("test_relu") is None


@pytest.mark.parametrize("fault,status", [("hang", "timeout"), ("die", "died")])
def test_a_hanging_or_dying_case_costs_only_that_case(fault, status, monkeypatch):
    monkeypatch.setenv(conformance.FAULT_ENV, f"test_abs={fault}")
    report = conformance.run_conformance("core", "cpu", jobs=1, case_timeout=5.0,
                                         modules=["abs", "relu"])
    statuses = {e["name"]: e["status"] for e in report["results"]}
    # (test_relu_expanded_ver18 is Relu written with CastLike, Max... : every op declared)
    assert statuses == {"test_abs": status, "test_relu": "pass",
                        "test_relu_expanded_ver18": "pass"}


def test_cli_json_report():
    done = subprocess.run([sys.executable, "-m", "portable.cli.main", "conformance", "--ops",
                           "all", "--module", "relu", "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["ops"] == "all" and report["cases"] == 2  # test_relu and its expansion
    assert report["by_op"]["Relu"]["pass"] == 2
