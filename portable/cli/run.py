"""Run an ONNX model on given (or random) inputs and print timings and output summaries.

Example:
    $ portable run model.onnx --inputs in.npz --outputs out.npz --device cpu
    $ portable run model.onnx --repeat 20 --json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from portable.cli.arguments import nonnegative_int, positive_int
from portable.cli.outputs import check_output_path, save_outputs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument("--inputs", help=".npz file of inputs by name (default: random)")
    parser.add_argument("--outputs", help="write the outputs to this .npz file")
    parser.add_argument("--device", default="cpu", help="cpu, opencl, cuda (optionally :N)")
    parser.add_argument("--repeat", type=nonnegative_int, default=3, help="timed runs after the first")
    parser.add_argument("--batch", type=positive_int, default=1, help="size of symbolic dims of "
                        "random inputs")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="seed of random inputs")
    parser.add_argument("--optimize", choices=("none", "basic", "all"), default="all",
                        help="graph optimisation level (portable.passes.pipeline)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def random_inputs(rep: Any, batch: int, seed: int) -> dict:
    """Inputs of the declared types; symbolic dims take ``batch``. Floats are standard
    normal, integers in [0, 10), booleans fair coins."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for name, type_ in rep.graph.inputs:
        shape = tuple(batch if d is None else d for d in type_.shape)
        if type_.dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(type_.dtype)
        elif type_.dtype.kind == "b":
            feeds[name] = rng.random(shape) < 0.5
        else:
            feeds[name] = rng.integers(0, 10, shape).astype(type_.dtype)
    return feeds


def _load_inputs(path: str) -> dict:
    import numpy as np

    from portable.errors import SerializationError

    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as exc:
        raise SerializationError(f"cannot read inputs {path}: {exc}") from exc


def _summary(array: Any) -> dict:
    import numpy as np

    info = {"shape": list(array.shape), "dtype": array.dtype.name}
    if array.size and array.dtype.kind in "biuf":
        values = array.astype(np.float64)
        finite = values[np.isfinite(values)]
        info.update(min=float(finite.min()) if finite.size else None,
                    max=float(finite.max()) if finite.size else None,
                    mean=float(finite.mean()) if finite.size else None,
                    nonfinite=int(values.size - finite.size))
    return info


def run(args: argparse.Namespace) -> int:
    from exporters.onnx import backend

    if args.outputs:
        check_output_path(args.outputs, [args.model, args.inputs])
    started = time.perf_counter()
    rep = backend.prepare(args.model, device=args.device, optimize=args.optimize)
    prepared = time.perf_counter()
    feeds = _load_inputs(args.inputs) if args.inputs else \
        random_inputs(rep, args.batch, args.seed)
    first = time.perf_counter()
    outputs = rep.run(feeds)
    after_first = time.perf_counter()
    times = []
    for _ in range(max(args.repeat, 0)):
        began = time.perf_counter()
        outputs = rep.run(feeds)
        times.append(time.perf_counter() - began)
    named = dict(zip(rep.output_names, outputs))
    if args.outputs:
        save_outputs(args.outputs, named)
    times.sort()
    report = {
        "model": args.model, "device": args.device,
        "inputs": {name: {"shape": list(a.shape), "dtype": a.dtype.name}
                   for name, a in feeds.items()},
        "random_inputs": not args.inputs,
        "prepare_ms": round(1e3 * (prepared - started), 2),
        "first_run_ms": round(1e3 * (after_first - first), 2),
        "median_run_ms": round(1e3 * times[len(times) // 2], 3) if times else None,
        "runs": len(times),
        "outputs": {name: _summary(a) for name, a in named.items()},
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{args.model} on {args.device}: prepare {report['prepare_ms']} ms, first run "
          f"{report['first_run_ms']} ms, median of {len(times)} runs "
          f"{report['median_run_ms']} ms" + (" (random inputs)" if not args.inputs else ""))
    for name, info in report["outputs"].items():
        stats = "" if info.get("min") is None else \
            f" min {info['min']:.6g} max {info['max']:.6g} mean {info['mean']:.6g}"
        print(f"  {name}: {info['dtype']}{info['shape']}{stats}")
    sys.stdout.flush()
    return 0
