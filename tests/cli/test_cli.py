"""The `portable` command line: version, devices, and the Symbol-API digits example."""
import json
import subprocess
import sys

import portable


def run_cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "portable.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_version():
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"portable {portable.__version__}"


def test_devices_lists_the_cpu_and_explains_the_rest():
    out = run_cli("devices", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert "NumPy" in report["cpu(0)"]
    assert "opencl(0)" in report and "cuda(0)" in report


def test_digits_example_prints_one_json_line():
    out = run_cli("digits", "--model", "mlp", "--epochs", "3", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["model"] == "mlp" and summary["epochs"] == 3
    assert 0.5 < summary["test_accuracy"] <= 1.0
