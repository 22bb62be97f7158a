"""Threads by measurement: where a second BLAS thread pays, and the main job on a busy machine.
Prints one JSON object.

    python benchmarks/blas_threads.py [--section gemm main_job] [--repeats 5] [--epochs 4]

``gemm``: float32 GEMMs of growing size (square, and the im2col shapes of LeNet and ResNet
convolutions), each timed at one thread and at every thread the process has, alternated, medians
of ``--repeats`` rounds. ``two_over_one`` below 1 means the threads pay. ``crossover_flops`` is
the smallest size (multiply-adds) from which they pay on every larger GEMM measured: the
figure ``backends/numpy/threads.PARALLEL_FLOPS`` is set from.

``main_job``: the README's main job (``portable train --model lenet``, ``--epochs`` epochs,
no progress bar) with one busy background process (a Python spin loop, as another user's job
would be), started with the default threads and with ``OPENBLAS_NUM_THREADS=1``, alternated;
and the same pair with the machine otherwise idle. The target is ``default_over_one_thread``
at most 1 under load: a busy machine never makes portable slower than one thread would be.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

# (name, M, K, N): C[M, N] = A[M, K] @ B[K, N]
GEMMS = [(f"square{n}", n, n, n) for n in (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)] + [
    ("lenet_conv2_b32", 50, 500, 32 * 8 * 8),      # 20->50 channels, 5x5, 8x8 out, batch 32
    ("lenet_fc_b32", 32, 800, 500),
    ("resnet_3x3_64_56", 64, 576, 3136),           # 64->64 channels, 3x3, 56x56 out, batch 1
    ("resnet_3x3_256_14", 256, 2304, 196),
    ("resnet_fc_b1", 1, 2048, 1000),
]


def _median_time(fn, min_seconds: float = 0.05) -> float:
    fn()
    runs, started = 0, time.perf_counter()
    while True:
        fn()
        runs += 1
        elapsed = time.perf_counter() - started
        if elapsed >= min_seconds and runs >= 3:
            return elapsed / runs


def gemm_section(repeats: int) -> dict:
    import numpy as np
    from threadpoolctl import ThreadpoolController

    controller = ThreadpoolController()
    most = max(lib["num_threads"] for lib in controller.info() if lib["user_api"] == "blas")
    rng = np.random.default_rng(0)
    rows = []
    for name, m, k, n in GEMMS:
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = np.empty((m, n), np.float32)
        times: dict[int, list[float]] = {1: [], most: []}
        for r in range(repeats):
            for threads in ((1, most) if r % 2 == 0 else (most, 1)):
                with controller.limit(limits=threads, user_api="blas"):
                    times[threads].append(_median_time(lambda: np.matmul(a, b, out=c)))
        one, all_ = statistics.median(times[1]), statistics.median(times[most])
        rows.append({"gemm": name, "flops": m * k * n, "one_us": round(one * 1e6, 2),
                     f"{most}_us": round(all_ * 1e6, 2), "two_over_one": round(all_ / one, 3)})
    rows.sort(key=lambda row: row["flops"])
    crossover = None
    for i, row in enumerate(rows):  # the smallest size from which every larger GEMM gains
        if all(later["two_over_one"] < 0.9 for later in rows[i:]):
            crossover = row["flops"]
            break
    from backends.numpy.threads import PARALLEL_FLOPS

    return {"threads": most, "gemms": rows, "crossover_flops": crossover,
            "parallel_flops_in_use": PARALLEL_FLOPS}


def _train(env: dict, epochs: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "portable.cli.main", "train", "--model", "lenet",
               "--epochs", str(epochs), "--no-progress", "--json", "--fresh", "--out", out]
        started = time.perf_counter()
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=1800)
        if done.returncode != 0:
            raise SystemExit(json.dumps({"error": "training failed", "stderr": done.stderr[-2000:]}))
        return time.perf_counter() - started


def main_job_section(repeats: int, epochs: int) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    base["PYTHONPATH"] = REPO + os.pathsep + base.get("PYTHONPATH", "")
    arms = {"default": base, "one_thread": {**base, "OPENBLAS_NUM_THREADS": "1"}}
    result = {"epochs": epochs, "cores": os.cpu_count()}
    for load in ("busy", "idle"):
        spinner = (subprocess.Popen([sys.executable, "-c", "while True: pass"])
                   if load == "busy" else None)
        try:
            times: dict[str, list[float]] = {arm: [] for arm in arms}
            for r in range(repeats):
                for arm in (list(arms) if r % 2 == 0 else list(reversed(arms))):
                    times[arm].append(_train(arms[arm], epochs))
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        medians = {arm: statistics.median(values) for arm, values in times.items()}
        result[load] = {f"{arm}_s": round(value, 2) for arm, value in medians.items()}
        result[load]["default_over_one_thread"] = round(medians["default"]
                                                        / medians["one_thread"], 3)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--section", nargs="+", choices=("gemm", "main_job"),
                        default=["gemm", "main_job"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args(argv)
    sys.path.insert(0, REPO)
    out: dict = {"benchmark": "blas_threads"}
    if "gemm" in args.section:
        out["gemm"] = gemm_section(args.repeats)
    if "main_job" in args.section:
        out["main_job"] = main_job_section(max(1, args.repeats // 2), args.epochs)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
