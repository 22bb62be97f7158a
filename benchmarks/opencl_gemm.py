"""OpenCL GEMM throughput and ResNet-50 inference latency beside NumPy on the same machine;
prints JSON.

GEMM: square float32 products C = A @ B for each size, timed on the OpenCL device (packing
included: the inputs count as new data at every call, as activations do, so the backend
cannot reuse the panels it packed of them; the queue drained after each call) and with
NumPy's BLAS (``np.matmul(..., out=)``, its default threads: both use every core),
alternating the two so that load on the machine affects both alike; each figure is the median
over ``--repeats`` rounds of at least ``--min-seconds`` each. GFLOP/s = 2 n^3 / seconds.
``numpy_threads`` says how many threads NumPy's BLAS had.

Models: the light model-zoo nets of ``onnx`` (``onnx/backend/test/data/light``, ResNet-50 by
default) imported with ``exporters.onnx`` and run through the same compiled plan on the
OpenCL device and on the CPU (NumPy kernels); the median latency of batch 1 after a warm-up
run (which compiles the kernels; PoCL caches them on disk for later runs).

Usage:
    python benchmarks/opencl_gemm.py [--sizes 256 512 1024 2048] [--repeats 3]
        [--min-seconds 0.5] [--models resnet50] [--device opencl:0]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402


def _timed(run, finish, min_seconds: float) -> float:
    """Median seconds of ``run`` (each followed by ``finish``) over at least min_seconds."""
    run()
    finish()
    times, began = [], time.perf_counter()
    while len(times) < 3 or time.perf_counter() - began < min_seconds:
        start = time.perf_counter()
        run()
        finish()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _blas_threads() -> int | None:
    """The threads of NumPy's BLAS (None where threadpoolctl is not installed)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    return max((pool["num_threads"] for pool in threadpool_info()
                if pool["user_api"] == "blas"), default=None)


def gemm_rows(device, sizes, repeats: int, min_seconds: float) -> list[dict]:
    from backends.opencl.gemm import gemm

    backend = device.backend
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        host_out = np.empty((n, n), np.float32)
        da, db = backend.from_numpy(a), backend.from_numpy(b)
        dc = backend.empty((n, n), np.float32)
        runtime = dc.runtime
        gemm(da, db, dc)
        error = float(np.abs(backend.to_numpy(dc) - a @ b).max() / np.abs(a @ b).max())
        ours, theirs = [], []

        def product() -> None:
            runtime.touch(da)  # (as a write to them would: their packed panels are dropped)
            runtime.touch(db)
            gemm(da, db, dc)

        for repeat in range(repeats):
            order = [0, 1] if repeat % 2 == 0 else [1, 0]
            for which in order:
                if which == 0:
                    ours.append(_timed(product, backend.synchronize, min_seconds))
                else:
                    theirs.append(_timed(lambda: np.matmul(a, b, out=host_out), lambda: None,
                                         min_seconds))
        flops = 2.0 * n ** 3
        cl_rate, np_rate = flops / statistics.median(ours) / 1e9, \
            flops / statistics.median(theirs) / 1e9
        rows.append({"n": n, "opencl_gflops": round(cl_rate, 2),
                     "numpy_gflops": round(np_rate, 2), "ratio": round(cl_rate / np_rate, 3),
                     "max_rel_error": error})
    return rows


def light_model(name: str) -> str:
    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")
    if not os.path.exists(path):
        raise SystemExit(f"no light model {name!r} at {path}")
    return path


def model_rows(device, names, repeats: int, min_seconds: float) -> list[dict]:
    import onnx

    from exporters.onnx import backend as onnx_backend

    rows = []
    for name in names:
        model = onnx.load(light_model(name))
        inits = {t.name for t in model.graph.initializer}
        info = next(i for i in model.graph.input if i.name not in inits)
        shape = tuple(d.dim_value for d in info.type.tensor_type.shape.dim)
        count = int(np.prod(shape))
        x = (np.arange(count).reshape(shape) / count).astype(np.float32)
        reps = {"opencl": onnx_backend.prepare(model, device=device),
                "numpy": onnx_backend.prepare(model, device="cpu")}
        start = time.perf_counter()
        first = reps["opencl"].run({info.name: x})[0]
        warmup = time.perf_counter() - start
        reference = reps["numpy"].run({info.name: x})[0]
        error = float(np.abs(first - reference).max() / max(np.abs(reference).max(), 1e-30))
        samples = {"opencl": [], "numpy": []}
        for repeat in range(repeats):
            order = ["opencl", "numpy"] if repeat % 2 == 0 else ["numpy", "opencl"]
            for which in order:
                rep = reps[which]
                samples[which].append(_timed(lambda: rep.run({info.name: x}), lambda: None,
                                             min_seconds))
        cl_ms = 1e3 * statistics.median(samples["opencl"])
        np_ms = 1e3 * statistics.median(samples["numpy"])
        rows.append({"model": name, "batch": shape[0], "opencl_ms": round(cl_ms, 2),
                     "numpy_ms": round(np_ms, 2), "ratio": round(cl_ms / np_ms, 3),
                     "first_run_s": round(warmup, 2), "max_rel_error": error})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=[256, 512, 1024, 2048])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=0.5)
    parser.add_argument("--models", nargs="*", default=["resnet50"])
    parser.add_argument("--device", default="opencl:0")
    args = parser.parse_args(argv)

    import portable as pt
    from portable.device import as_device

    device = as_device(args.device)
    result = {"device": device.backend.describe(), "numpy": np.__version__,
              "cpu_count": os.cpu_count(), "numpy_threads": _blas_threads()}
    result["gemm"] = gemm_rows(device, args.sizes, args.repeats, args.min_seconds)
    ratios = [row["ratio"] for row in result["gemm"]]
    result["gemm_summary"] = {
        "geomean_ratio": round(float(np.exp(np.mean(np.log(ratios)))), 3),
        "min_ratio": min(ratios), "target_ratio": 1.0,  # (no slower than NumPy at any size)
        "meets_target": bool(min(ratios) >= 1.0)}
    if args.models:
        result["models"] = model_rows(device, args.models, args.repeats, args.min_seconds)
    print(json.dumps(result, indent=1))
    pt.nd.waitall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
