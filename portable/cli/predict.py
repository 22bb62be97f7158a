"""Run a model on given inputs with the lean on-device predictor, inside a memory budget.

MODEL is an ``.onnx`` file or a deployment file (``portable train --export m.portable``); the
format is read from the file itself. Only NumPy is needed (pyopencl for ``--device opencl``).
``--inputs`` is an ``.npz`` of arrays by input name, or an ``.npy`` for a single-input model.
All rows run as one batch (the model is rebatched), or with ``--batch-size N`` in runs of N
rows whose outputs are joined along the first axis: less memory for many rows. The inputs are
read within the budget too (1 GiB without one): sizes an ``.npy`` header or an ``.npz``
archive declares are checked before anything is allocated or decompressed.

Prints the outputs (name, shape, top-5 classes of a 2-D float output), the latency and the
memory: what the plan needs beside the budget and the process's peak resident set. A model
over the budget or a corrupted file is refused with exit code 2.

Example:
    $ portable predict runs/lenet.portable --inputs x.npy --memory-budget 64MB
    $ portable predict model.onnx --inputs in.npz --outputs out.npz --json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from portable.cli.arguments import byte_size, positive_int
from portable.predict.resident import machine_bytes
from portable.cli.outputs import check_output_path, save_outputs

TOP_K = 5
ROWS_SHOWN = 5  # rows of top-k classes printed per output (JSON: up to TOP_ROWS)
TOP_ROWS = 10000  # rows whose top-k classes are listed at all (JSON included)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="an .onnx file or a deployment (.portable) file")
    parser.add_argument("--inputs", required=True, metavar="X.npz|X.npy",
                        help=".npz of arrays by input name, or .npy for a single-input model")
    parser.add_argument("--device", default="cpu", help="cpu or opencl (optionally :N)")
    parser.add_argument("--memory-budget", type=byte_size, default=None, metavar="SIZE",
                        help="refuse a model needing more than this, e.g. 64MB, 512k, 1.5GiB")
    parser.add_argument("--batch-size", type=positive_int, default=None, metavar="N",
                        help="rows per run: the size of symbolic batch dims (default: all "
                        "rows of the inputs in one run)")
    parser.add_argument("--outputs", metavar="OUT.npz", help="write the outputs by name")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def read_inputs(path: str, budget: int | None = None) -> dict[str, Any] | Any:
    """The arrays of an ``.npz`` (a dict by name) or one ``.npy`` array, read by the bounded
    reader (``portable.io.arrays``): sizes are checked against ``budget`` (or, with none, the
    reader's default limit) before anything is allocated or decompressed; never unpickles.
    ``portable run`` reads its inputs with this too.

    Raises:
        SerializationError: the file cannot be read (names the file and the member).
        MemoryBudgetError: the arrays would take more than the budget.
    """
    from portable.errors import MemoryBudgetError
    from portable.io.arrays import DEFAULT_LIMIT, read_arrays

    try:
        return read_arrays(path, DEFAULT_LIMIT if budget is None else budget, "inputs")
    except MemoryBudgetError as exc:
        where = ("--memory-budget" if budget is not None else
                 "the default for inputs; --memory-budget sets another")
        raise MemoryBudgetError(f"{exc} ({where})") from None


def name_inputs(arrays: dict[str, Any] | Any, input_names: list[str], path: str) -> dict:
    """``arrays`` as a dict by the model's input names (an ``.npy`` feeds a one-input model)."""
    from portable.errors import BindError

    if not isinstance(arrays, dict):
        if len(input_names) != 1:
            raise BindError(f"{path} holds one array but the model has {len(input_names)} "
                            f"inputs ({', '.join(input_names)}): give an .npz by name")
        return {input_names[0]: arrays}
    missing = [n for n in input_names if n not in arrays]
    extra = [n for n in arrays if n not in input_names]
    if missing or extra:
        raise BindError(f"{path} does not match the model's inputs {input_names}: "
                        f"missing {missing}, unexpected {extra}")
    return dict(arrays)


def predict_in_batches(predictor: Any, feeds: dict,
                       limit: int | None = None) -> tuple[list, int]:
    """Run ``feeds`` through ``predictor``; rows beyond its batch run in several calls.

    Returns the outputs (joined along axis 0) and the number of calls. Feeds that already
    have the predictor's shapes run once; otherwise every input must have ``k * batch`` rows
    for the model's (common, leading) batch, or a BindError says what to change. The joined
    outputs (and the parts they are joined from) are held against ``limit`` bytes before the
    first call: a model whose outputs are much larger than its inputs is refused up front.
    """
    import numpy as np

    from portable.errors import BindError

    shapes = {n: tuple(predictor.input_types[n].shape) for n in predictor.input_names}
    if all(tuple(np.shape(feeds[n])) == shapes[n] for n in shapes):
        return predictor.predict(feeds), 1
    batches = {s[0] for s in shapes.values() if s}
    rows = {np.shape(a)[0] for a in feeds.values() if np.ndim(a)}
    if len(batches) != 1 or len(rows) != 1 or any(not s for s in shapes.values()):
        return predictor.predict(feeds), 1  # the predictor names the mismatch
    batch, total = batches.pop(), rows.pop()
    if batch <= 0 or total % batch:
        raise BindError(f"inputs have {total} rows, not a multiple of the model's batch "
                        f"{batch}: pass --batch-size with a divisor of {total}")
    if limit is not None:
        _check_joined_outputs(predictor, total // batch, limit)
    parts = [predictor.predict({n: a[i:i + batch] for n, a in feeds.items()})
             for i in range(0, total, batch)]
    return [np.concatenate(column) for column in zip(*parts)], len(parts)


def _check_joined_outputs(predictor: Any, calls: int, limit: int) -> None:
    """Refuse ``calls`` runs whose outputs, kept and then joined (twice their bytes), would
    exceed ``limit``."""
    from portable.errors import MemoryBudgetError
    from portable.io.arrays import array_nbytes
    from portable.sizes import format_bytes as fmt

    per_call = sum(array_nbytes(t.shape, t.dtype) for t in predictor.output_types.values())
    if 2 * calls * per_call > limit:
        raise MemoryBudgetError(f"{calls} runs of {fmt(per_call)} of outputs each, kept and "
                                f"joined, need {fmt(2 * calls * per_call)}, more than the "
                                f"limit of {fmt(limit)}: predict fewer rows at a time")


def top_k(scores: Any, k: int = TOP_K) -> tuple[list, list]:
    """Per row of a 2-D array: the ``k`` highest classes and their scores, best first."""
    import numpy as np

    k = min(k, scores.shape[1])
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return order.tolist(), np.take_along_axis(scores, order, axis=1).tolist()


def _describe(name: str, array: Any) -> dict:
    """Name, shape, dtype and, for a 2-D float output, the top classes of its first
    ``TOP_ROWS`` rows (Python lists cost ~100 times the array's bytes: not for every row of a
    large input)."""
    info: dict[str, Any] = {"name": name, "shape": list(array.shape), "dtype": array.dtype.name}
    if array.ndim == 2 and array.dtype.kind == "f" and array.shape[1] > 0:
        info["top5"], info["top5_scores"] = top_k(array[:TOP_ROWS])
        if len(array) > TOP_ROWS:
            info["top5_rows_omitted"] = len(array) - TOP_ROWS
    return info


# The compiled CPU tier (numba) holds about 70 MB once loaded, more than a small model's
# whole plan: on-device prediction leaves it off unless PORTABLE_JIT=1 asks for it.
LEAN_ENVIRONMENT = {"PORTABLE_JIT": "0"}


def run(args: argparse.Namespace) -> int:
    for key, value in LEAN_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    from portable.errors import MemoryBudgetError
    from portable.predict import Predictor, peak_resident_bytes
    from portable.sizes import format_bytes

    if args.outputs:
        check_output_path(args.outputs, [args.model, args.inputs])
    arrays = read_inputs(args.inputs, args.memory_budget)
    rows = next((len(a) for a in (arrays.values() if isinstance(arrays, dict) else [arrays])
                 if getattr(a, "ndim", 0)), 1)
    # Without a budget the plan is still held to what the machine can give: refused before
    # it is allocated rather than killed while it runs.
    limit = args.memory_budget if args.memory_budget is not None else machine_bytes()
    started = time.perf_counter()
    try:
        predictor = Predictor(args.model, device=args.device, batch_size=args.batch_size or rows,
                              memory_budget=limit)
    except MemoryBudgetError as exc:
        hint = "" if args.memory_budget is not None else \
            " (this machine's memory: no --memory-budget was given)"
        if args.batch_size or rows == 1:
            raise MemoryBudgetError(f"{exc}{hint}") from exc
        raise MemoryBudgetError(f"{exc}{hint}; that plans all {rows} input rows as one batch: "
                                f"a smaller --batch-size needs less") from exc
    loaded = time.perf_counter()
    feeds = name_inputs(arrays, predictor.input_names, args.inputs)
    outputs, calls = predict_in_batches(predictor, feeds, limit)
    finished = time.perf_counter()
    named = dict(zip(predictor.output_names, outputs))
    if args.outputs:
        save_outputs(args.outputs, named)
    peak, source = peak_resident_bytes()
    report = {
        "model": str(args.model), "device": str(predictor.device),
        "inputs": {n: {"shape": list(a.shape), "dtype": a.dtype.name} for n, a in feeds.items()},
        "runs": calls, "load_ms": round(1e3 * (loaded - started), 3),
        "predict_ms": round(1e3 * (finished - loaded), 3),
        "memory": dict(predictor.memory, budget_bytes=args.memory_budget),
        "peak_resident_bytes": peak,
        "peak_resident_source": source,
        "outputs": [_describe(n, a) for n, a in named.items()],
    }
    if args.json:
        print(json.dumps(report))
        return 0
    memory = report["memory"]
    budget = memory.get("budget_bytes")
    print(f"{os.path.basename(args.model)} on {report['device']}: loaded in "
          f"{report['load_ms']:.1f} ms, {calls} run(s) in {report['predict_ms']:.2f} ms")
    print(f"memory: {format_bytes(memory['total_bytes'])} planned (plan "
          f"{format_bytes(memory['plan_bytes'])} + weights {format_bytes(memory['weights_bytes'])}"
          f" + inputs {format_bytes(memory['io_bytes'])}), budget "
          f"{format_bytes(budget) if budget is not None else 'none'}; peak resident "
          f"{format_bytes(peak) if peak is not None else 'unknown'}")
    width = max(len("output"), *(len(n) for n in named))
    print(f"{'output':<{width}}  {'shape':<14} {'dtype':<8} top-{TOP_K} (class: score)")
    for info in report["outputs"]:
        print(f"{info['name']:<{width}}  {str(info['shape']):<14} {info['dtype']:<8}", end="")
        if "top5" not in info:
            print(" -")
            continue
        shown = list(zip(info["top5"], info["top5_scores"]))[:ROWS_SHOWN]
        for row, (classes, scores) in enumerate(shown):
            pad = "" if row == 0 else " " * (width + 2 + 14 + 1 + 8)
            print(f"{pad} row {row}: " + ", ".join(f"{c}: {s:.4g}"
                                                   for c, s in zip(classes, scores)))
        if info["shape"][0] > ROWS_SHOWN:
            print(" " * (width + 2 + 14 + 1 + 8) + f" ... {info['shape'][0] - ROWS_SHOWN} "
                  f"more rows (--json for up to {TOP_ROWS}, --outputs for all)")
    sys.stdout.flush()
    return 0
