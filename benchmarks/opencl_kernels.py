"""OpenCL pooling and elementwise kernels beside NumPy on the same CPU; prints JSON.

Each op runs as a compiled one-node graph on the OpenCL device (the queue drained after each
run) and as the plain NumPy expression that computes the same values (``np.add(..., out=)``,
a strided window view reduced for pooling), and as the same one-node graph on the cpu device
(our NumPy kernels). The three alternate round by round so that load on the machine affects all
alike; each figure is the median over ``--repeats`` rounds of the median of at least
``--min-seconds`` of runs. ``ratio`` is OpenCL time / NumPy time (below 1: OpenCL is faster),
``ratio_to_best`` OpenCL time / the faster of the two NumPy ways. ``opencl_queued_ms`` is the
time per run when 20 runs are enqueued and waited for once, as ops inside a compiled segment
are: on PoCL, waiting for one launch costs 35-40 us (with the backend's host work, an Add
with its wait about 0.1 ms), more than an elementwise kernel over 200K elements computes
(about 30 us).
The OpenCL output is checked against NumPy's before timing (``max_abs_error``).

``--limits phone`` runs the OpenCL side under a phone profile (``backends.opencl.device``).

Usage:
    python benchmarks/opencl_kernels.py [--ops MaxPool AveragePool Add Relu] [--repeats 5]
        [--min-seconds 0.2] [--limits phone] [--device opencl:0]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from numpy.lib.stride_tricks import sliding_window_view  # noqa: E402


def _pool_numpy(x, reduce, out):
    """3x3 windows at stride 2 (no padding) of NCHW ``x``, reduced by ``reduce``."""
    windows = sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    return reduce(windows, axis=(-2, -1), out=out)


def _average(windows, axis, out):
    return np.mean(windows, axis=axis, out=out)


# op -> (input shapes, attributes, NumPy peer writing into ``out``)
OPS = {
    "MaxPool": ([(1, 96, 109, 109)], {"kernel_shape": [3, 3], "strides": [2, 2]},
                lambda xs, out: _pool_numpy(xs[0], np.max, out)),
    "AveragePool": ([(1, 96, 109, 109)], {"kernel_shape": [3, 3], "strides": [2, 2]},
                    lambda xs, out: _pool_numpy(xs[0], _average, out)),
    "Add": ([(1, 64, 56, 56), (1, 64, 56, 56)], {},
            lambda xs, out: np.add(xs[0], xs[1], out=out)),
    "Relu": ([(1, 64, 56, 56)], {}, lambda xs, out: np.maximum(xs[0], 0, out=out)),
}


def _timed(run, min_seconds: float) -> float:
    run()
    times, began = [], time.perf_counter()
    while len(times) < 5 or time.perf_counter() - began < min_seconds:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


_QUEUED = 20


def _plan(op, shapes, attrs, device, hosts):
    """A compiled one-node graph of ``op`` on ``device``, its bound inputs, and its output."""
    from portable.executor.compiled import CompiledGraph
    from portable.ir import GraphBuilder, TensorType

    builder = GraphBuilder(op)
    names = [builder.input(f"x{i}", s, np.float32) for i, s in enumerate(shapes)]
    builder.op(op, *names, outputs=["y"], name="node", **attrs)
    graph = builder.build(["y"])
    types = {f"x{i}": TensorType(s, np.float32) for i, s in enumerate(shapes)}
    plan = CompiledGraph(graph, device, types, keep=["y"])
    backend = device.backend
    env = plan.bind({f"x{i}": backend.from_numpy(h) for i, h in enumerate(hosts)})

    def run():
        plan.execute(env)
        backend.synchronize()

    def queued():  # _QUEUED runs enqueued, one wait: what the op costs inside a segment
        with backend.deferred():
            for _ in range(_QUEUED):
                plan.execute(env)
        backend.synchronize()

    def result():
        return np.array(backend.to_numpy(env["y"]))
    return run, result, queued


def op_rows(device, ops, repeats: int, min_seconds: float) -> list[dict]:
    import portable as pt

    rows = []
    for op in ops:
        shapes, attrs, peer = OPS[op]
        rng = np.random.default_rng(0)
        hosts = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
        want = np.empty_like(np.asarray(peer(hosts, None)))
        opencl = _plan(op, shapes, attrs, device, hosts)
        runs = {"opencl": opencl[:2], "opencl_queued": (opencl[2], None),
                "cpu_backend": _plan(op, shapes, attrs, pt.cpu(), hosts)[:2],
                "numpy": (lambda: peer(hosts, want), lambda: want)}
        runs["opencl"][0]()
        peer(hosts, want)
        error = float(np.abs(runs["opencl"][1]() - want).max())
        samples: dict[str, list[float]] = {k: [] for k in runs}
        order = list(runs)
        for repeat in range(repeats):
            for which in order if repeat % 2 == 0 else order[::-1]:
                samples[which].append(_timed(runs[which][0], min_seconds))
        ms = {k: 1e3 * statistics.median(v) for k, v in samples.items()}
        ms["opencl_queued"] /= _QUEUED
        rows.append({"op": op, "shapes": ["x".join(map(str, s)) for s in shapes],
                     "opencl_ms": round(ms["opencl"], 3),
                     "opencl_queued_ms": round(ms["opencl_queued"], 3),
                     "numpy_ms": round(ms["numpy"], 3),
                     "cpu_backend_ms": round(ms["cpu_backend"], 3),
                     "ratio": round(ms["opencl"] / ms["numpy"], 3),
                     "ratio_to_best": round(ms["opencl"] / min(ms["numpy"], ms["cpu_backend"]), 3),
                     "max_abs_error": error})
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=list(OPS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=0.2)
    parser.add_argument("--limits", default=None, help="a PORTABLE_OPENCL_LIMITS profile")
    parser.add_argument("--device", default="opencl:0")
    args = parser.parse_args(argv)

    from portable.device import as_device

    device = as_device(args.device)
    backend = device.backend
    scope = backend.limited(args.limits) if args.limits else contextlib.nullcontext()
    with scope:
        report = {"device": backend.describe(), "limits": args.limits,
                  "load_average": list(os.getloadavg()),
                  "ops": op_rows(device, args.ops, args.repeats, args.min_seconds)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
