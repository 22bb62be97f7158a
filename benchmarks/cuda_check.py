"""The prepared GPU check of the CUDA backend: prints one JSON object.

On a machine without CUDA it prints ``{"skipped": "<the probe's reason>"}`` and exits 0.
With a GPU it reports, in well under 10 minutes on one GPU:

- ``op_table``: op-table forward cases passing on CUDA against the NumPy backend, beside the
  count NumPy itself passes (cases of ops in ``backends/cupy/overrides.REFUSED`` and of
  element types CuPy cannot hold are counted apart, with the first failures listed);
- ``conformance``: ``portable conformance --device cuda --json`` (the ONNX node cases).

Not yet written (listed under ``not_written`` in the output, so nobody mistakes their absence
for a pass): light ONNX models, LeNet on digits, ResNet-50 latency b1/b32 beside
onnxruntime-gpu and PyTorch, a ResNet-18-style CIFAR training step, dist_sync over NCCL.

This script has not been run on a GPU yet: it was written on a CPU-only machine.

Usage: python benchmarks/cuda_check.py [--conformance-timeout 300]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

NOT_WRITTEN = ["light_models", "lenet_digits_training", "resnet50_latency_b1_b32",
               "cifar_resnet18_training_step", "dist_sync_nccl"]


def op_table(device) -> dict:
    """Forward cases: CUDA against the NumPy backend's outputs."""
    import numpy as np

    from backends.cupy.overrides import REFUSED
    from portable.errors import BackendError
    from tests.ops.harness import Case, assert_output_matches, run_ours
    from tests.ops.test_op_table import CASES

    counts = {"cases": len(CASES), "numpy_pass": 0, "cuda_pass": 0, "refused_op": 0,
              "unsupported_dtype": 0, "failed": 0}
    failures = []
    start = time.perf_counter()
    for case in CASES:
        try:
            want = run_ours(case)
        except Exception:
            continue
        counts["numpy_pass"] += 1
        if case.op in REFUSED:
            counts["refused_op"] += 1
            continue
        loose = Case(**{**case.__dict__, "rtol": max(case.rtol, 1e-4),
                        "atol": max(case.atol, 1e-5)})
        try:
            got = run_ours(case, device=device)
            for j, (g, w) in enumerate(zip(got, want)):
                assert_output_matches(g, np.asarray(w) if w is not None and not isinstance(
                    w, list) else w, loose, j)
            counts["cuda_pass"] += 1
        except BackendError as exc:
            if "cannot hold" in str(exc) or "string tensor" in str(exc):
                counts["unsupported_dtype"] += 1
            else:
                counts["failed"] += 1
                failures.append(f"{case.id}: {str(exc)[:160]}")
        except Exception as exc:
            counts["failed"] += 1
            failures.append(f"{case.id}: {type(exc).__name__}: {str(exc)[:160]}")
    counts["seconds"] = round(time.perf_counter() - start, 1)
    counts["first_failures"] = failures[:30]
    return counts


def conformance(timeout: float) -> dict:
    command = [sys.executable, "-m", "portable.cli.main", "conformance", "--device", "cuda",
               "--json"]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"exit {done.returncode}", "stderr": done.stderr[-2000:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conformance-timeout", type=float, default=300.0)
    args = parser.parse_args(argv)

    from backends.cupy.device import probe

    status = probe()
    if not status.available:
        print(json.dumps({"skipped": status.reason}))
        return 0
    import portable as pt

    device = pt.cuda(0)
    report = {"device": device.backend.describe(), "driver": status.driver_version,
              "runtime": status.runtime_version, "not_written": NOT_WRITTEN}
    for name, section in (("op_table", lambda: op_table(device)),
                          ("conformance", lambda: conformance(args.conformance_timeout))):
        try:
            report[name] = section()
        except Exception as exc:  # one broken section must not hide the others
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
