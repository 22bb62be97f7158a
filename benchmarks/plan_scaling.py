"""Memory planning time against graph size: chains and random DAGs of 1k, 10k and 100k nodes.

Shapes are inferred before timing (``plan_memory`` takes the TypeInfo); each size is planned
several times and the median CPU time is kept (other processes share the machine). Prints one
JSON object: per graph kind and size, the seconds, microseconds per node, and the plan against
the liveness lower bound; then, per kind, the ratio of time per node at the largest size to that
at the smallest (target: within 1.5x) and whether the largest planned in under 2 seconds.

    $ python benchmarks/plan_scaling.py [--sizes 1000 10000 100000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from portable.ir import Graph, Node, TensorType  # noqa: E402
from portable.passes.infer import infer_types  # noqa: E402
from portable.passes.plan_memory import plan_memory  # noqa: E402

WIDTHS = (64, 128, 256)  # feature sizes of the values; MatMul moves between them
UNARY = ("Relu", "Tanh", "Sigmoid", "Neg")


def _weights() -> dict[str, np.ndarray]:
    return {f"w{i}_{j}": np.zeros((i, j), np.float32) for i in WIDTHS for j in WIDTHS}


def chain(n: int, seed: int = 0) -> Graph:
    """A chain: MatMul to a random width, then an elementwise op, alternately."""
    rng = np.random.default_rng(seed)
    nodes, value, width = [], "x", WIDTHS[0]
    for i in range(n):
        if i % 2 == 0:
            new = int(rng.choice(WIDTHS))
            nodes.append(Node("MatMul", (value, f"w{width}_{new}"), (f"v{i}",)))
            width = new
        else:
            nodes.append(Node(UNARY[i % len(UNARY)], (value,), (f"v{i}",)))
        value = f"v{i}"
    return Graph(tuple(nodes), (("x", TensorType((32, WIDTHS[0]))),), (value,), _weights(),
                 f"chain{n}")


def random_dag(n: int, seed: int = 0, window: int = 16, far: float = 0.02) -> Graph:
    """Each node reads one or two earlier values: mostly from the last ``window`` values, with
    probability ``far`` from anywhere before (long skip connections, long lifetimes)."""
    rng = np.random.default_rng(seed)
    by_width: dict[int, list[str]] = {w: [] for w in WIDTHS}
    by_width[WIDTHS[0]].append("x")
    order: list[tuple[str, int]] = [("x", WIDTHS[0])]
    nodes = []

    def pick() -> tuple[str, int]:
        if rng.random() < far:
            return order[int(rng.integers(0, len(order)))]
        return order[max(0, len(order) - 1 - int(rng.integers(0, window)))]

    for i in range(n):
        a, width = pick()
        kind = rng.random()
        out = f"v{i}"
        if kind < 0.3:
            new = int(rng.choice(WIDTHS))
            nodes.append(Node("MatMul", (a, f"w{width}_{new}"), (out,)))
            width = new
        elif kind < 0.6 and len(by_width[width]) > 1:
            pool = by_width[width][-window:]
            nodes.append(Node("Add", (a, pool[int(rng.integers(0, len(pool)))]), (out,)))
        else:
            nodes.append(Node(UNARY[int(rng.integers(0, len(UNARY)))], (a,), (out,)))
        by_width[width].append(out)
        order.append((out, width))
    # the last value is the output; values nothing reads die where they are made
    return Graph(tuple(nodes), (("x", TensorType((32, WIDTHS[0]))),), (order[-1][0],),
                 _weights(), f"dag{n}")


def measure(graph: Graph, repeats: int) -> dict:
    info = infer_types(graph)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        plan = plan_memory(graph, info)
        times.append(time.process_time() - start)
    seconds = statistics.median(times)
    return {"nodes": len(graph.nodes), "seconds": seconds,
            "us_per_node": 1e6 * seconds / len(graph.nodes),
            "arena_bytes": plan.arena_bytes, "lower_bound_bytes": plan.lower_bound_bytes,
            "planned_over_bound": plan.arena_bytes / max(plan.lower_bound_bytes, 1),
            "naive_over_planned": plan.naive_bytes / max(plan.arena_bytes, 1)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    result: dict = {"benchmark": "plan_scaling", "repeats": args.repeats, "kinds": {}}
    for kind, make in (("chain", chain), ("random_dag", random_dag)):
        rows = {}
        for n in args.sizes:
            rows[str(n)] = measure(make(n), args.repeats)
        small, large = rows[str(min(args.sizes))], rows[str(max(args.sizes))]
        result["kinds"][kind] = {
            "sizes": rows,
            "per_node_ratio_largest_vs_smallest": large["us_per_node"] / small["us_per_node"],
            "largest_seconds": large["seconds"],
            "linear_within_1_5x": large["us_per_node"] <= 1.5 * small["us_per_node"],
            "largest_under_2s": large["seconds"] < 2.0}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
