"""Per-op cost of a 1,000-op chain of tiny Convs: what portable spends around each kernel
(plan step, geometry, views), beside onnxruntime on the same model. Prints one JSON object.

    python benchmarks/conv_chain.py [--ops 1000] [--channels 4] [--size 8] [--rounds 7]

The model is ``--ops`` Convs of ``--channels`` channels, 3x3, padding 1, on a
1 x C x size x size input, each reading the previous one's output (random weights, seed 0),
built with onnx.helper. Both runtimes run at one thread (``OPENBLAS_NUM_THREADS=1`` is set
before NumPy loads; onnxruntime's ``intra_op_num_threads=1``). Rounds alternate between them;
each figure is the median over rounds of the best of five runs, divided by the op count. A
Conv this small is almost all overhead: its arithmetic (4 x 4 x 9 x 64 multiply-adds) takes
well under a microsecond.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def chain_model(ops: int, channels: int, size: int):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights, nodes, previous = [], [], "x"
    for i in range(ops):
        # identity at the centre tap plus small noise: the signal neither dies out (denormals
        # would slow both runtimes and make the comparison empty) nor blows up over the chain
        w = rng.standard_normal((channels, channels, 3, 3)) * 0.01
        w[:, :, 1, 1] += np.eye(channels)
        w = w.astype(np.float32)
        weights.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [previous, f"w{i}"], [f"y{i}"], pads=[1, 1, 1, 1]))
        previous = f"y{i}"
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, "conv_chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, shape)],
                              weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _best_of(run, times: int = 5) -> float:
    best = float("inf")
    for _ in range(times):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=1000)
    parser.add_argument("--channels", type=int, default=4)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)

    import onnxruntime as ort

    from exporters.onnx import backend

    model = chain_model(args.ops, args.channels, args.size)
    x = np.random.default_rng(1).standard_normal(
        (1, args.channels, args.size, args.size)).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    rep = backend.prepare(model)
    runs = {"portable": lambda: rep.run({"x": x}),
            "onnxruntime": lambda: session.run(None, {"x": x})}
    (ours,), (theirs,) = runs["portable"](), runs["onnxruntime"]()
    scale = float(np.max(np.abs(theirs)))
    if not 1e-3 < scale < 1e3:
        raise SystemExit(f"the chain's output has max {scale}: choose other weights")
    error = float(np.max(np.abs(ours - theirs))) / scale
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(args.rounds):
        for name in (list(runs) if r % 2 == 0 else list(reversed(runs))):
            samples[name].append(_best_of(runs[name]) / args.ops * 1e6)
    per_op = {name: round(statistics.median(values), 2) for name, values in samples.items()}
    print(json.dumps({
        "benchmark": "conv_chain", "ops": args.ops,
        "shape": [1, args.channels, args.size, args.size], "kernel": [3, 3], "threads": 1,
        "portable_us_per_op": per_op["portable"], "onnxruntime_us_per_op": per_op["onnxruntime"],
        "portable_over_onnxruntime": round(per_op["portable"] / per_op["onnxruntime"], 2),
        "target_us_per_op": 5.0, "max_relative_difference": error,
        "compiled_tier": os.environ.get("PORTABLE_JIT", "default")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
