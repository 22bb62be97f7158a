"""Time per tiny imperative op: portable on the naive and the threaded engine, beside plain
NumPy and (when installed) PyTorch eager, measured in the same run. Prints one JSON object.

    python benchmarks/engine_overhead.py [--ops 20000] [--repeats 5]

A tiny op is an elementwise add of two 4-element float32 arrays (``array``), or of one and a
Python float (``scalar``: ``x + 1.0``, which must not make a new array per call); the figure is
the wall time of N dependent ops (each reads the previous result) divided by N. Each round runs
every runtime once, in an order that flips every round, so load on the machine falls on all
alike; figures are medians over ``--repeats`` rounds. Targets: 8 us per op on the naive engine,
15 us on the threaded one.

``*_calls`` count the Python-level function calls (cProfile's count, C functions included) per
op of the same chains: a figure that load on the machine cannot move, to compare changes on a
busy machine.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def portable_chain(engine_name: str, ops: int, scalar: bool):
    from portable import nd
    from portable.engine import ENGINES, use_engine

    engine = ENGINES[engine_name]()  # one engine for every round (arrays keep their engine)
    with use_engine(engine):
        one = 1.0 if scalar else nd.ones((4,))

    def run() -> None:
        with use_engine(engine):
            x = nd.zeros((4,))
            for _ in range(ops):
                x = x + one
            x.wait_to_read()
    return run


def calls_per_op(engine_name: str, scalar: bool, ops: int = 2000) -> float:
    """Function calls cProfile counts per op of a ``portable_chain`` (after a warm-up run)."""
    import cProfile
    import pstats

    run = portable_chain(engine_name, ops, scalar)
    run()
    profile = cProfile.Profile()
    profile.runcall(run)
    return round(pstats.Stats(profile).total_calls / ops, 1)


def numpy_chain(ops: int, scalar: bool):
    one = np.float32(1.0) if scalar else np.ones(4, np.float32)

    def run() -> None:
        x = np.zeros(4, np.float32)
        for _ in range(ops):
            x = x + one
    return run


def torch_chain(ops: int, scalar: bool):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    one = 1.0 if scalar else torch.ones(4)

    def run() -> None:
        x = torch.zeros(4)
        for _ in range(ops):
            x = x + one
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    result = {"op": "add, 4 float32 elements, dependent chain", "ops": args.ops}
    for operand, scalar in (("array", False), ("scalar", True)):
        runs = {"numpy": numpy_chain(args.ops, scalar),
                "portable_naive": portable_chain("naive", args.ops, scalar),
                "portable_threaded": portable_chain("threaded", args.ops, scalar),
                "torch_eager": torch_chain(args.ops, scalar)}
        runs = {name: run for name, run in runs.items() if run is not None}
        for run in runs.values():
            run()  # warm the type-rule caches and the worker threads
        samples: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(args.repeats):
            for name in (list(runs) if r % 2 == 0 else list(reversed(runs))):
                started = time.perf_counter()
                runs[name]()
                samples[name].append((time.perf_counter() - started) / args.ops * 1e6)
        for name in ("numpy", "portable_naive", "portable_threaded", "torch_eager"):
            values = samples.get(name)
            result[f"{name}_{operand}_us"] = (round(statistics.median(values), 3) if values
                                              else None)
        for engine_name in ("naive", "threaded"):
            result[f"portable_{engine_name}_{operand}_calls"] = calls_per_op(engine_name, scalar)
    result["target_naive_us"], result["target_threaded_us"] = 8.0, 15.0
    print(json.dumps(result))


if __name__ == "__main__":
    main()
