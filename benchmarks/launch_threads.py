"""What a user of ``portable launch`` meets: wall time of a 2-rank LeNet run started with no
thread settings, against one process training the same epochs. Prints one JSON object.

    python benchmarks/launch_threads.py [--ranks 2] [--epochs 12] [--repeats 3] [--model lenet]

Four arms, run in turn ``--repeats`` times so that they share the machine's noise, each from
an environment with every thread variable removed (what a user who set nothing has), each into
a fresh temporary ``--out`` folder:

* ``launch``: ``portable launch -n R -- portable train --kvstore dist_sync --epochs N
  --no-progress --json``: the launcher chooses each rank's threads and binding;
* ``launch_unmanaged``: the same with ``OMP_NUM_THREADS`` set to the core count and
  ``--mpi-arg=--bind-to --mpi-arg=none``, both of which the launcher keeps: every rank starts a
  thread per core and nothing is bound, which is what the launcher did before it shared the
  cores out (the cost it avoids);
* ``single``: ``portable train --epochs N --no-progress --json`` in one process;
* ``single_one_thread``: the same with ``OMP_NUM_THREADS=1``: on a busy machine a process
  whose OpenBLAS threads wait for each other by spinning can lose more to that than its second
  thread gains: this arm shows one process without that loss.

Reported per arm: the median wall time (process start to exit, so start-up counts: it is what
the user waits for) and the median ``train_seconds`` of rank 0's JSON line (``fit`` alone).
``launch_over_single`` = launch wall / single wall; the target is at most 1 (the launched job
at least as fast as one process); ``launch_over_single_one_thread`` the same against the
one-thread process. ``unmanaged_over_launch`` is what sharing the cores out saves. ``threads``
is the launcher's own line. The default of 12 epochs is ``portable train``'s for LeNet; a few
epochs measure mostly start-up (imports, MPI, the plot), not training.
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
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "PORTABLE_CPU_WORKERS")


def _clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without thread settings (plus ``extra``)."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _run(cmd: list[str], env: dict[str, str]) -> dict:
    """Run one training job; its wall time, rank 0's JSON and the launcher's line."""
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(json.dumps({"benchmark": "launch_threads", "command": cmd,
                                     "error": done.stderr[-3000:]}))
    note = [line for line in done.stderr.splitlines() if line.startswith("portable launch:")]
    return {"wall": wall, "train": json.loads(lines[-1])["train_seconds"],
            "note": note[0] if note else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="lenet")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "portable.cli.main"]
    train = ["train", "--model", args.model, "--epochs", str(args.epochs), "--no-progress",
             "--json"]
    job = ["--", *cli, *train, "--kvstore", "dist_sync"]
    launch = [*cli, "launch", "-n", str(args.ranks)]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    arms = {"launch": ([*launch, *job], _clean_env()),
            "launch_unmanaged": ([*launch, "--mpi-arg=--bind-to", "--mpi-arg=none", *job],
                                 _clean_env(OMP_NUM_THREADS=str(cores))),
            "single": ([*cli, *train], _clean_env()),
            "single_one_thread": ([*cli, *train], _clean_env(OMP_NUM_THREADS="1"))}
    runs: dict[str, list[dict]] = {name: [] for name in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name, (cmd, env) in arms.items():
                out = os.path.join(tmp, f"{name}-{repeat}")  # a fresh folder: no --fresh needed
                runs[name].append(_run([*cmd, "--out", out], env))
    report = {name: {"wall_s": round(statistics.median(r["wall"] for r in rs), 2),
                     "train_s": round(statistics.median(r["train"] for r in rs), 2),
                     "walls_s": [round(r["wall"], 2) for r in rs],
                     "threads": rs[0]["note"]}
              for name, rs in runs.items()}
    single = report["single"]["wall_s"]
    print(json.dumps({"benchmark": "launch_threads", "model": args.model, "ranks": args.ranks,
                      "epochs": args.epochs, "repeats": args.repeats, "cores": cores,
                      "arms": report,
                      "launch_over_single": round(report["launch"]["wall_s"] / single, 3),
                      "launch_over_single_one_thread": round(
                          report["launch"]["wall_s"] / report["single_one_thread"]["wall_s"], 3),
                      "unmanaged_over_launch": round(report["launch_unmanaged"]["wall_s"]
                                                     / report["launch"]["wall_s"], 3),
                      "target_launch_over_single": 1.0}, indent=1))


if __name__ == "__main__":
    main()
