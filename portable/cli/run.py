"""Run an ONNX model on given (or random) inputs and print timings and output summaries.

Inputs come from an ``.npz`` by input name or an ``.npy`` for a one-input model, read by the
same bounded reader as ``portable predict``; random inputs are counted before they are drawn.
Either way the inputs may take at most ``--memory-budget`` bytes (1 GiB when not given), so a
tiny model declaring a 30000x30000 input is refused before anything is allocated.

Example:
    $ portable run model.onnx --inputs in.npz --outputs out.npz --device cpu
    $ portable run model.onnx --repeat 20 --json
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from portable.cli.arguments import byte_size, nonnegative_int, positive_int
from portable.cli.outputs import check_output_path, save_outputs
from portable.cli.predict import name_inputs, read_inputs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument("--inputs", metavar="X.npz|X.npy", help=".npz of inputs by name, or "
                        ".npy for a one-input model (default: random)")
    parser.add_argument("--outputs", help="write the outputs to this .npz file")
    parser.add_argument("--device", default="cpu", help="cpu, opencl, cuda (optionally :N)")
    parser.add_argument("--repeat", type=nonnegative_int, default=3,
                        help="timed runs after the first")
    parser.add_argument("--batch", type=positive_int, default=1, help="size of symbolic dims of "
                        "random inputs")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="seed of random inputs")
    parser.add_argument("--memory-budget", type=byte_size, default=None, metavar="SIZE",
                        help="the most bytes the inputs (read or random) may take, e.g. 64MB, "
                        "2GiB (default 1GiB)")
    parser.add_argument("--optimize", choices=("none", "basic", "all"), default="all",
                        help="graph optimisation level (portable.passes.pipeline)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _drawing_plan(dtype: Any) -> tuple[str, int]:
    """How an input of ``dtype`` is drawn, and the bytes per element held while drawing it:
    float32/64 and integers are drawn in their own dtype; other floats through a float32
    array, anything else through int64 (the temporary counts too)."""
    import numpy as np

    if dtype in (np.float32, np.float64):
        return "normal", dtype.itemsize
    if dtype.kind == "f":
        return "normal-cast", dtype.itemsize + 4
    if dtype.kind in "biu":
        return "integers", dtype.itemsize
    return "integers-cast", dtype.itemsize + 8


def random_inputs(rep: Any, batch: int, seed: int, limit: int | None = None) -> dict:
    """Inputs of the declared types; symbolic dims take ``batch``. Floats are standard
    normal, integers in [0, 10), booleans fair coins.

    Every input's bytes are counted (Python ints: no overflow, whatever the model declares)
    and their sum held against ``limit`` (default ``portable.io.arrays.DEFAULT_LIMIT``)
    before any is drawn; MemoryBudgetError names the input, its shape and the limit.
    """
    import numpy as np

    from portable.errors import MemoryBudgetError
    from portable.io.arrays import DEFAULT_LIMIT
    from portable.sizes import format_bytes as fmt

    limit = DEFAULT_LIMIT if limit is None else limit
    planned, total = [], 0
    for name, type_ in rep.graph.inputs:
        shape = tuple(batch if d is None else int(d) for d in type_.shape)
        how, per_element = _drawing_plan(type_.dtype)
        need = math.prod(shape) * per_element  # Python ints: exact for any declared shape
        total += need
        if total > limit:
            with_before = f" ({fmt(total)} with the inputs before it)" if total > need else ""
            raise MemoryBudgetError(
                f"random input {name!r} of shape {shape} ({type_.dtype.name}) needs "
                f"{fmt(need)}{with_before}, more than the limit of {fmt(limit)} for inputs: "
                f"give --inputs, a smaller --batch or a larger --memory-budget")
        planned.append((name, shape, type_.dtype, how))
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape, dtype, how in planned:
        if how == "normal":
            feeds[name] = rng.standard_normal(shape, dtype=dtype)
        elif how == "normal-cast":
            feeds[name] = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.integers(0, 2, shape, dtype=np.bool_)
        elif how == "integers":
            feeds[name] = rng.integers(0, 10, shape, dtype=dtype)
        else:
            feeds[name] = rng.integers(0, 10, shape).astype(dtype)
    return feeds


def _summary(array: Any, chunk: int = 1 << 20) -> dict:
    """Shape, dtype and, for numbers, the min, max and mean of the finite values and the count
    of the others, taken ``chunk`` elements at a time (a float64 copy of a whole large output
    would double what the run holds)."""
    import numpy as np

    info = {"shape": list(array.shape), "dtype": array.dtype.name}
    if not (array.size and array.dtype.kind in "biuf"):
        return info
    flat = np.ravel(array)
    low, high, total, count = np.inf, -np.inf, 0.0, 0
    for start in range(0, flat.size, chunk):
        values = flat[start:start + chunk].astype(np.float64)
        finite = values[np.isfinite(values)]
        if finite.size:
            low, high = min(low, finite.min()), max(high, finite.max())
            total, count = total + float(finite.sum()), count + finite.size
    info.update(min=float(low) if count else None, max=float(high) if count else None,
                mean=total / count if count else None, nonfinite=int(flat.size - count))
    return info


def run(args: argparse.Namespace) -> int:
    from exporters.onnx import backend

    if args.outputs:
        check_output_path(args.outputs, [args.model, args.inputs])
    started = time.perf_counter()
    rep = backend.prepare(args.model, device=args.device, optimize=args.optimize)
    prepared = time.perf_counter()
    if args.inputs:
        feeds = name_inputs(read_inputs(args.inputs, args.memory_budget), rep.input_names,
                            args.inputs)
    else:
        feeds = random_inputs(rep, args.batch, args.seed, args.memory_budget)
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
