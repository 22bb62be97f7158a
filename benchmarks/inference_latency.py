"""Inference latency of the nine light model-zoo nets (onnx/backend/test/data/light): portable's
CPU backend beside onnxruntime, measured in the same run; prints JSON.

Each runtime runs in its own worker process (two runtimes in one process slow each other down
on a small machine), at 1 and 2 threads (BLAS threads for portable, ``intra_op_num_threads``
for onnxruntime). A worker prepares every model once per batch size and times it: the median
of at least ``--min-iters`` runs and ``--min-seconds`` of running. The workers of the two
runtimes take turns, ``--repeats`` times (the order flips each repeat), and each figure is the
median over repeats, so load on the machine affects both alike. For batch 8 the input's batch
dim and the batch dim of the nets' flatten Reshape targets (stored as ``[1, ...]``) become 8.

The summary gives, per batch size and thread count, the geometric mean over the models of
portable's latency divided by onnxruntime's, and the models with the largest ratio.

Usage:
    python benchmarks/inference_latency.py [--models squeezenet resnet50 ...] [--batches 1 8]
        [--threads 1 2] [--repeats 2] [--min-iters 3] [--min-seconds 1.0] [--profile]

``--profile`` adds, per model (batch 1, one thread, in its own worker), the share of portable's
run time spent in each op type (kernels timed one by one in the compiled plan), to see which
kernels dominate.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def light_models() -> dict[str, str]:
    import onnx

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return {name[len("light_"):-len(".onnx")]: os.path.join(folder, name)
            for name in sorted(os.listdir(folder)) if name.endswith(".onnx")}


def batched_model(path: str, batch: int) -> tuple:
    """The model with batch dim ``batch`` (input and flatten Reshape targets), and its input
    (arange(n) / n, as onnx's backend test feeds it)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    inits = {t.name: t for t in model.graph.initializer}
    info = next(i for i in model.graph.input if i.name not in inits)
    dims = info.type.tensor_type.shape.dim
    dims[0].dim_value = batch
    for node in model.graph.node:
        if node.op_type == "Reshape" and node.input[1] in inits:
            target = numpy_helper.to_array(inits[node.input[1]]).copy()
            if target.size and target[0] == 1:
                target[0] = batch
                inits[node.input[1]].CopyFrom(numpy_helper.from_array(target, node.input[1]))
    shape = tuple(d.dim_value for d in dims)
    count = int(np.prod(shape))
    x = (np.arange(count).reshape(shape) / count).astype(np.float32)
    return model, info.name, x


def _time(run, min_iters: int, min_seconds: float) -> tuple[float, int]:
    run()  # warm-up (plans, caches)
    times = []
    began = time.perf_counter()
    while len(times) < min_iters or time.perf_counter() - began < min_seconds:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times), len(times)


def worker(runtime: str, threads: int, models: list[str], batches: list[int],
           min_iters: int, min_seconds: float) -> None:
    """Time each model in this process; one JSON line per (model, batch)."""
    paths = light_models()
    for name in models:
        for batch in batches:
            model, input_name, x = batched_model(paths[name], batch)
            if runtime == "portable":
                from exporters.onnx import backend

                rep = backend.prepare(model)
                ms, iters = _time(lambda: rep.run({input_name: x}), min_iters, min_seconds)
            else:
                import onnxruntime as ort

                options = ort.SessionOptions()
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                session = ort.InferenceSession(model.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
                ms, iters = _time(lambda: session.run(None, {input_name: x}), min_iters,
                                  min_seconds)
            print(json.dumps({"model": name, "batch": batch, "ms": round(ms, 3),
                              "iters": iters}), flush=True)


def profile(models: list[str]) -> dict:
    """Share of portable's time per op type (batch 1): the compiled plan run one step at a
    time (``CompiledGraph.execute(env, i, i + 1)``), each step timed."""
    from exporters.onnx import backend

    paths = light_models()
    result = {}
    for name in models:
        model, input_name, x = batched_model(paths[name], 1)
        rep = backend.prepare(model)
        rep.run({input_name: x})
        plan = rep.plan({input_name: x})
        per_op: dict[str, float] = {}
        for _ in range(3):
            env = plan.bind({input_name: x})
            for index, step in enumerate(plan.steps):
                start = time.perf_counter()
                plan.execute(env, index, index + 1)
                op = step.node.op
                per_op[op] = per_op.get(op, 0.0) + time.perf_counter() - start
        total = sum(per_op.values())
        result[name] = {op: round(t / total, 3) for op, t in
                        sorted(per_op.items(), key=lambda kv: -kv[1]) if t / total >= 0.01}
        result[name]["ms_per_run"] = round(1e3 * total / 3, 2)
    return result


def _spawn(runtime: str, threads: int, args: argparse.Namespace) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), PYTHONPATH=ROOT)
    command = [sys.executable, os.path.abspath(__file__), "--worker", runtime, "--threads",
               str(threads), "--min-iters", str(args.min_iters), "--min-seconds",
               str(args.min_seconds), "--models", *args.models, "--batches",
               *map(str, args.batches)]
    done = subprocess.run(command, capture_output=True, text=True, env=env,
                          timeout=args.worker_timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{runtime} worker failed:\n{done.stderr[-3000:]}")
    if runtime == "profile":
        return json.loads(done.stdout.splitlines()[-1])
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {(row["model"], row["batch"]): row["ms"] for row in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--min-iters", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--worker-timeout", type=float, default=3600.0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--worker", choices=("portable", "onnxruntime", "profile"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.models = args.models or list(light_models())
    if args.worker == "profile":
        print(json.dumps(profile(args.models)))
        return 0
    if args.worker:
        worker(args.worker, args.threads[0], args.models, args.batches, args.min_iters,
               args.min_seconds)
        return 0

    samples: dict[tuple, dict[str, list[float]]] = {}
    for repeat in range(args.repeats):
        for threads in args.threads:
            order = ("portable", "onnxruntime") if repeat % 2 == 0 else \
                ("onnxruntime", "portable")
            for runtime in order:
                for (model, batch), ms in _spawn(runtime, threads, args).items():
                    samples.setdefault((model, batch, threads), {}).setdefault(
                        runtime, []).append(ms)
    rows, summary = [], {}
    for (model, batch, threads), by_runtime in sorted(samples.items()):
        ours = statistics.median(by_runtime["portable"])
        theirs = statistics.median(by_runtime["onnxruntime"])
        rows.append({"model": model, "batch": batch, "threads": threads,
                     "portable_ms": round(ours, 2), "onnxruntime_ms": round(theirs, 2),
                     "ratio": round(ours / theirs, 3)})
    for batch in args.batches:
        for threads in args.threads:
            group = [r for r in rows if r["batch"] == batch and r["threads"] == threads]
            if not group:
                continue
            geomean = math.exp(statistics.fmean(math.log(r["ratio"]) for r in group))
            worst = sorted(group, key=lambda r: -r["ratio"])[:3]
            summary[f"batch{batch}_threads{threads}"] = {
                "geomean_ratio": round(geomean, 3),
                "largest_gaps": [(r["model"], r["ratio"]) for r in worst]}
    import numpy
    import onnxruntime

    report = {"benchmark": "inference_latency", "unit": "ms (median)",
              "ratio": "portable / onnxruntime (lower is better)",
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "numpy": numpy.__version__, "onnxruntime": onnxruntime.__version__},
              "repeats": args.repeats, "summary": summary, "results": rows}
    if args.profile:  # in a one-thread worker, like the figures it explains
        report["portable_time_by_op_batch1_threads1"] = _spawn("profile", 1, args)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
