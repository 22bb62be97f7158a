"""Conv's gradient kernels, ConvTranspose (dX) and ConvGradWeight (dW), on the Conv shapes of
the LeNet and the CIFAR ResNet-18 of benchmarks/hybridize.py, at one BLAS thread; prints JSON.

Per shape: the time of each ConvTranspose formulation of ``backends/xp/kernels/conv_grads.py``
(``scatter``, ``scatter_batch``, and at stride 1 ``flip`` and ``flip_batch``),
which one the plan-time rule picks, ConvGradWeight's time, the forward Conv's per-image and
batch-wide GEMMs (``fwd_image``, ``fwd_batch``; ``forward_batched``: the Conv plan's choice),
and PyTorch's ``convolution_backward`` for the same gradient and ``conv2d`` (when torch is
importable) as the peer: ratios are ours / PyTorch (below 1:
faster). Each figure is the median of ``--rounds`` rounds in which all methods take turns, so
load on the machine affects them alike. Every formulation's result is checked against the
first one's (float32, relative to the largest value).

``jit_dx``/``jit_dw`` time the compiled CPU tier's kernels (backends/numpy/jit/conv_grads.py,
bound as a plan binds them; where a shape is not theirs, the xp kernel they hand it to), and
``jit_*_taken`` says whether their own loop ran; their results are checked against the
xp plans' (``jit_max_rel_diff``).

Usage:
    python benchmarks/conv_grads.py [--rounds 7] [--shapes lenet2 r64 ...]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads: one BLAS thread
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

# name -> (batch, C in, M out, input size, kernel, stride, pad): the Conv whose gradients run.
SHAPES = {
    "lenet1": (64, 1, 20, 28, 5, 1, 0),
    "lenet2": (64, 20, 50, 12, 5, 1, 0),
    "r_stem": (32, 3, 64, 32, 3, 1, 1),
    "r64": (32, 64, 64, 32, 3, 1, 1),
    "r128_s2": (32, 64, 128, 32, 3, 2, 1),
    "r128_proj": (32, 64, 128, 32, 1, 2, 0),
    "r128": (32, 128, 128, 16, 3, 1, 1),
    "r256_s2": (32, 128, 256, 16, 3, 2, 1),
    "r256_proj": (32, 128, 256, 16, 1, 2, 0),
    "r256": (32, 256, 256, 8, 3, 1, 1),
    "r512_s2": (32, 256, 512, 8, 3, 2, 1),
    "r512_proj": (32, 256, 512, 8, 1, 2, 0),
    "r512": (32, 512, 512, 4, 3, 1, 1),
}


def _ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def measure(name: str, rounds: int, torch) -> dict:
    import portable as pt
    from backends.xp.kernels import conv_plan
    from backends.xp.kernels.conv_grads import TRANSPOSE_PATHS, GradWeightPlan, TransposePlan
    from portable.backend import KernelContext
    from portable.ir.graph import TensorType
    from portable.ops.conv import output_padding, window_geometry

    n, c, m, size, k, s, p = SHAPES[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, size, size), dtype=np.float32)
    w = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    conv_attrs = {"strides": [s, s], "pads": [p] * 4, "dilations": [1, 1]}
    geom = window_geometry(x.shape[2:], w.shape[2:], conv_attrs)
    dy = rng.standard_normal((n, m) + tuple(geom.out), dtype=np.float32)
    t_attrs = {**conv_attrs, "group": 1, "kernel_shape": [k, k],
               "output_padding": list(output_padding(geom, x.shape[2:])), "auto_pad": "NOTSET",
               "output_shape": None}
    backend = pt.cpu().backend
    ctx = KernelContext(np, rng, backend)
    types = [TensorType(dy.shape, dy.dtype), TensorType(w.shape, w.dtype)]
    chosen = TransposePlan(backend, types, t_attrs).path
    plans = {}
    for path in TRANSPOSE_PATHS:
        try:
            plans[path] = TransposePlan(backend, types, t_attrs, path=path)
        except ValueError:
            continue  # (flip needs stride 1)
    outputs = {path: np.empty(x.shape, np.float32) for path in plans}
    grad_plan = GradWeightPlan(backend, [types[0].__class__(x.shape, x.dtype), types[0]],
                               t_attrs)
    dw = np.empty(w.shape, np.float32)
    methods = {f"dx_{path}": (lambda plan=plan, out=outputs[path]: plan.run(ctx, dy, w, out))
               for path, plan in plans.items()}
    methods["dw"] = lambda: grad_plan.run(ctx, x, dy, dw)
    jit_out = _compiled_methods(backend, ctx, x, w, dy, t_attrs, methods)
    # The forward Conv: its plan's choice, and per image / batch-wide forced.
    forward = conv_plan.ConvPlan(backend, [types[0].__class__(x.shape, x.dtype), types[1]],
                                 t_attrs)
    y_fwd = np.empty(dy.shape, np.float32)
    for batched in (False, True):
        if forward.pointwise or forward.tile:
            break
        plan = conv_plan.ConvPlan(backend, [types[0].__class__(x.shape, x.dtype), types[1]],
                                  t_attrs)
        plan.batched = batched
        methods["fwd_" + ("batch" if batched else "image")] = (
            lambda plan=plan: plan.forward(ctx, x, w, y_fwd))
    if torch is not None:
        tx, tw, tdy = (torch.from_numpy(a) for a in (x, w, dy))

        def peer(mask):
            return lambda: torch.ops.aten.convolution_backward(
                tdy, tx, tw, None, [s, s], [p, p], [1, 1], False, [0, 0], 1, mask)
        methods["torch_dx"] = peer([True, False, False])
        methods["torch_dw"] = peer([False, True, False])
        methods["torch_fwd"] = lambda: torch.nn.functional.conv2d(tx, tw, None, s, p)
    times: dict[str, list[float]] = {key: [] for key in methods}
    for fn in methods.values():
        fn()  # warm: scratch allocated, pages touched
    for _ in range(rounds):
        for key, fn in methods.items():
            times[key].append(_ms(fn))
    med = {key: round(statistics.median(v), 3) for key, v in times.items()}
    first = outputs[next(iter(outputs))]
    scale = float(np.abs(first).max())
    errors = {path: float(np.abs(out - first).max()) / scale for path, out in outputs.items()}
    jit_errors = {}
    if jit_out:
        jit_errors["dx"] = float(np.abs(jit_out["dx"] - first).max()) / scale
        jit_errors["dw"] = float(np.abs(jit_out["dw"] - dw).max()) / float(np.abs(dw).max())
    row = {"shape": dict(zip(("batch", "c", "m", "size", "kernel", "stride", "pad"),
                             SHAPES[name])),
           "chosen": chosen, "forward_batched": forward.batched, "ms": med,
           "best": min(plans, key=lambda path: med[f"dx_{path}"]),
           "max_rel_diff_between_paths": max(errors.values())}
    if jit_out:
        row["jit_dx_taken"], row["jit_dw_taken"] = jit_out["taken"]
        row["jit_max_rel_diff"] = max(jit_errors.values())
    if torch is not None:
        if jit_out:
            row["jit_dx_ratio_vs_torch"] = round(med["jit_dx"] / med["torch_dx"], 3)
            row["jit_dw_ratio_vs_torch"] = round(med["jit_dw"] / med["torch_dw"], 3)
        row["dx_ratio_chosen_vs_torch"] = round(med[f"dx_{chosen}"] / med["torch_dx"], 3)
        row["dw_ratio_vs_torch"] = round(med["dw"] / med["torch_dw"], 3)
    return row


def _compiled_methods(backend, ctx, x, w, dy, t_attrs, methods) -> dict:
    """Adds ``jit_dx`` and ``jit_dw`` (the compiled tier's ConvTranspose and ConvGradWeight,
    bound once) to ``methods``; returns their outputs and whether their own loops take the
    shape, or {} without numba."""
    from backends.numpy import jit
    from portable.backend import array_types, bound_kernel
    from portable.ops import registry

    if not jit.available():
        return {}
    from backends.numpy.jit import conv_grads

    def attrs(op):
        specs = registry.get(op).attrs
        return {key: t_attrs.get(key, spec.default) for key, spec in specs.items()}

    out = {"dx": np.empty(x.shape, np.float32), "dw": np.empty(w.shape, np.float32)}
    taken = []
    for key, op, inputs, result in (("dx", "ConvTranspose", [dy, w], out["dx"]),
                                    ("dw", "portable.ConvGradWeight", [x, dy], out["dw"])):
        given = attrs(op)
        types, out_types = array_types(inputs), array_types([result])
        state = conv_grads.kernels[op].compiled_prepare(types, out_types, given)
        taken.append(bool(state is not None and state[0]))
        bound = bound_kernel(jit.kernels[op], backend, types, out_types, given)
        methods[f"jit_{key}"] = (lambda bound=bound, inputs=inputs, result=result, given=given:
                                 bound(ctx, inputs, [result], given))
    out["taken"] = tuple(taken)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    args = parser.parse_args()
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    rows = {name: measure(name, args.rounds, torch) for name in args.shapes}
    total = {key: round(sum(r["ms"].get(key, 0.0) for r in rows.values()), 3)
             for key in ("dw", "jit_dx", "jit_dw", "torch_dx", "torch_dw")}
    total["dx_chosen"] = round(sum(r["ms"][f"dx_{r['chosen']}"] for r in rows.values()), 3)
    total["dx_scatter"] = round(sum(r["ms"]["dx_scatter"] for r in rows.values()), 3)
    print(json.dumps({"platform": platform.platform(), "numpy": np.__version__,
                      "torch": None if torch is None else torch.__version__,
                      "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
                      "rounds": args.rounds, "shapes": rows, "total_ms": total}, indent=1))


if __name__ == "__main__":
    main()
