"""Time per tiny imperative op: portable on the naive and the threaded engine, beside plain
NumPy and (when installed) PyTorch eager, measured in the same run. Prints one JSON object.

    python benchmarks/engine_overhead.py [--ops 20000] [--repeats 5]

A tiny op is an elementwise add of two 4-element float32 arrays; the figure is the wall time
of N dependent ops (each reads the previous result) divided by N, median of the repeats.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def _time(fn, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def portable_chain(engine_name: str, ops: int, repeats: int) -> float:
    from portable import nd
    from portable.engine import use_engine

    with use_engine(engine_name):
        one = nd.ones((4,))

        def run() -> None:
            x = nd.zeros((4,))
            for _ in range(ops):
                x = x + one
            x.wait_to_read()

        run()  # warm the type-rule cache and the worker threads
        return _time(run, repeats) / ops


def numpy_chain(ops: int, repeats: int) -> float:
    one = np.ones(4, np.float32)

    def run() -> None:
        x = np.zeros(4, np.float32)
        for _ in range(ops):
            x = x + one

    return _time(run, repeats) / ops


def torch_chain(ops: int, repeats: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    one = torch.ones(4)

    def run() -> None:
        x = torch.zeros(4)
        for _ in range(ops):
            x = x + one

    run()
    return _time(run, repeats) / ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    us = 1e6
    result = {
        "op": "add, 4 float32 elements, dependent chain",
        "ops": args.ops,
        "numpy_us": numpy_chain(args.ops, args.repeats) * us,
        "portable_naive_us": portable_chain("naive", args.ops, args.repeats) * us,
        "portable_threaded_us": portable_chain("threaded", args.ops, args.repeats) * us,
    }
    torch_time = torch_chain(args.ops, args.repeats)
    result["torch_eager_us"] = None if torch_time is None else torch_time * us
    result["target_us"] = 20.0
    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v)
                      for k, v in result.items()}))


if __name__ == "__main__":
    main()
