"""Winograd F(2,3) and F(4,3) beside im2col + GEMM for stride-1 3x3 convolutions, at one BLAS
thread; prints JSON.

Part ``shapes``: per 3x3 stride-1 conv shape of the light model-zoo nets (C -> M channels on an
H x W input, pads 1), at batch 1 and 8, the kernel time of im2col + GEMM, F(2,3) and F(4,3)
(each the median of ``--rounds`` rounds, the three methods alternating within a round), the
ratios im2col / Winograd, and what the automatic rule picks. The Winograd times are with the
transformed weights cached (inference: the weights do not change between calls);
``weight_transform_ms`` is what a call pays on top when they did change (a training step).

Part ``models``: per light model (onnx's backend/test/data/light) at batch 1, the largest abs
error of its float32 outputs (and of the logits before a final Softmax) against a float64 run
of the same model (Winograd off), with Winograd off (``PORTABLE_WINOGRAD=0``), the default
(the compiled tier's F(4,3), ``backends/numpy/jit/winograd_conv.py``, where it takes a Conv),
``auto`` (the xp kernel's measured rule besides) and forced to F(2,3) or F(4,3) (``MODE_NAMES``),
and the latency off, by default and under ``auto`` (medians of alternated rounds). All nine
models with both weight kinds take about two minutes on two cores; ``--models`` narrows it.
The shipped models fill every weight with 0.02 (and their BatchNorms scale by 0.14, so an early
layer's rounding fades before the output); ``--weights random`` replaces the conv and Gemm
weights with seeded random ones (fan-in scaled), which tests accuracy harder.

Part ``training`` (not in the default run; about two minutes): the CIFAR ResNet-18 training
step of ``benchmarks/hybridize.py`` with Winograd off and by default: the error of its 3x3
Convs' forward, dX and dW kernels against float64, its gradients' against float64, and its
step time (``training_part``).

Usage:
    python benchmarks/winograd.py [--part shapes models training] [--batches 1 8] [--rounds 5]
        [--models resnet50 squeezenet ...] [--weights shipped random]
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

# (C, M, H=W) of the light nets' 3x3 stride-1 convolutions (input size, pads 1).
SHAPES = {
    "resnet50": [(64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7)],
    "densenet121": [(128, 32, 56), (128, 32, 14)],
    "inception_v2": [(64, 96, 28), (192, 224, 7)],
    "squeezenet": [(16, 64, 55), (32, 128, 27), (64, 256, 13)],
    "inception_v1": [(96, 128, 27), (160, 320, 13)],
    "zfnet512": [(512, 512, 12)],
    "vgg19": [(256, 256, 56)],
}
ENV = "PORTABLE_WINOGRAD"
# PORTABLE_WINOGRAD values -> names in the JSON: 0 turns every Winograd path off; unset (the
# default) runs the compiled F(4,3) on the float32 3x3 Convs it takes and leaves the xp kernel
# on im2col; auto adds the xp kernel's measured rule; 2 and 4 force the xp kernel's tile (2
# also turns the compiled path off).
MODE_NAMES = {"0": "off", "default": "default", "auto": "auto", "2": "f2", "4": "f4"}


def _median_rounds(runs: dict, rounds: int) -> dict:
    """Median seconds per named callable, the callables taking turns within each round."""
    times = {name: [] for name in runs}
    for fn in runs.values():
        fn()  # warm-up: scratch buffers, page faults
    for r in range(rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in order:
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def shapes_part(batches: list[int], rounds: int) -> list[dict]:
    import numpy as np

    import portable as pt
    from backends.xp.kernels import winograd
    from backends.xp.kernels.conv import conv_forward
    from portable.backend import KernelContext
    from portable.ops.conv import window_geometry

    backend = pt.cpu().backend
    rows = []
    for model, shapes in SHAPES.items():
        for c, m, size in shapes:
            for batch in batches:
                if batch * c * m * size * size > 8 * 256 * 256 * 28 * 28:
                    continue  # keeps the run short (vgg19 at batch 8)
                rng = np.random.default_rng(0)
                x = rng.standard_normal((batch, c, size, size)).astype(np.float32)
                w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
                attrs = {"pads": [1, 1, 1, 1]}
                geom = window_geometry(x.shape[2:], (3, 3), attrs)
                y = np.empty((batch, m) + geom.out, np.float32)
                ctx = KernelContext(np, rng, backend)
                runs = {"im2col": lambda: conv_forward(ctx, x, w, geom, 1, y)}
                for tile in (2, 4):
                    runs[f"f{tile}"] = (lambda t: lambda: winograd.conv2d(ctx, x, w, geom, t, y)
                                        )(tile)
                t = _median_rounds(runs, rounds)  # weights cached after the warm-up
                transform = _median_rounds(
                    {f"f{k}": (lambda k: lambda: winograd.weight_transform(np, w, k))(k)
                     for k in (2, 4)}, rounds)
                rows.append({
                    "model": model, "C": c, "M": m, "HW": size, "batch": batch,
                    "ms": {k: round(v * 1e3, 3) for k, v in t.items()},
                    "weight_transform_ms": {k: round(v * 1e3, 3) for k, v in transform.items()},
                    "speedup_f2": round(t["im2col"] / t["f2"], 3),
                    "speedup_f4": round(t["im2col"] / t["f4"], 3),
                    "auto": winograd.automatic_tile(batch, c, m, tuple(geom.out)),
                })
                print(json.dumps(rows[-1]), flush=True)
    return rows


# -- whole models ---------------------------------------------------------------------------------


def _as_float64(model):
    """The same model computing in float64: float tensors (initializers, ConstantOfShape
    values, graph inputs, outputs and value infos) become doubles."""
    import copy

    import numpy as np
    from onnx import TensorProto, numpy_helper

    model = copy.deepcopy(model)
    graph = model.graph

    def widen(tensor):
        if tensor.data_type == TensorProto.FLOAT:
            tensor.CopyFrom(numpy_helper.from_array(
                numpy_helper.to_array(tensor).astype(np.float64), tensor.name))

    for t in graph.initializer:
        widen(t)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                widen(attr.t)
    for info in list(graph.input) + list(graph.output) + list(graph.value_info):
        if info.type.tensor_type.elem_type == TensorProto.FLOAT:
            info.type.tensor_type.elem_type = TensorProto.DOUBLE
    return model


def _random_weights(model, seed: int = 0):
    """Conv and Gemm weights (ConstantOfShape outputs feeding input 1) as seeded random
    initializers scaled by 1/sqrt(fan-in), so activations keep their size layer to layer."""
    import numpy as np
    from onnx import numpy_helper

    graph = model.graph
    shapes = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    weights = {n.input[1] for n in graph.node if n.op_type in ("Conv", "Gemm")}
    rng = np.random.default_rng(seed)
    keep = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.output[0] in weights:
            shape = tuple(int(d) for d in shapes[node.input[0]])
            fan_in = int(np.prod(shape[1:])) or 1
            value = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
            graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    return model


def _with_logits(model):
    """The model with the input of its final Softmax as a second output: the probabilities
    of a net with constant weights are all but uniform and hide errors; the logits do not."""
    from onnx import TensorProto, helper

    last = model.graph.node[-1]
    if last.op_type == "Softmax":
        model.graph.output.append(
            helper.make_tensor_value_info(last.input[0], TensorProto.FLOAT, None))
    return model


def models_part(names: list[str], rounds: int, weights: list[str]) -> list[dict]:
    import numpy as np

    from benchmarks.inference_latency import batched_model, light_models
    from exporters.onnx import backend

    paths = light_models()
    rows = []
    for name in names or list(paths):
        for kind in weights:
            model, input_name, x = batched_model(paths[name], 1)
            if kind == "random":
                model = _random_weights(model)
            model = _with_logits(model)
            os.environ[ENV] = "0"
            references = backend.prepare(_as_float64(model)).run(
                {input_name: x.astype(np.float64)})
            names = [o.name for o in model.graph.output]
            errors, reps = {}, {}
            for mode in ("0", "default", "auto", "2", "4"):
                # (the path is chosen when a plan is prepared: one prepared model per mode)
                if mode == "default":
                    os.environ.pop(ENV, None)
                else:
                    os.environ[ENV] = mode
                reps[mode] = backend.prepare(model)
                outs = reps[mode].run({input_name: x})
                errors[MODE_NAMES[mode]] = {
                    name: float(f"{np.abs(out.astype(np.float64) - ref).max():.3g}")
                    for name, out, ref in zip(names, outs, references)}

            def timed(mode):
                return lambda: reps[mode].run({input_name: x})

            t = _median_rounds({"off": timed("0"), "default": timed("default"),
                                "auto": timed("auto")}, rounds)
            os.environ.pop(ENV, None)
            rows.append({
                "model": name, "weights": kind, "outputs": names,
                "max_abs_output": [float(f"{np.abs(r).max():.3g}") for r in references],
                "max_abs_error": errors,
                "ms": {k: round(v * 1e3, 2) for k, v in t.items()},
                "speedup_default": round(t["off"] / t["default"], 3),
                "speedup_auto": round(t["off"] / t["auto"], 3),
            })
            print(json.dumps(rows[-1]), flush=True)
    return rows


# (C = M, H = W) of the CIFAR ResNet-18's 3x3 stride-1 Convs (benchmarks/hybridize.py).
RESNET18_CIFAR = [(64, 32), (128, 16), (256, 8), (512, 4)]
TRAINING_BATCH = 32


def _kernel_errors(op: str, inputs: list, out_shape: tuple, attrs: dict) -> dict:
    """The largest error of ``op`` on float32 ``inputs``, Winograd off and by default, relative
    to the largest value of the same kernel run in float64 (which Winograd never takes)."""
    import numpy as np

    import portable as pt
    from portable.backend import KernelContext, array_types, bound_kernel

    backend = pt.cpu().backend

    def run(arrays, mode):
        if mode == "default":
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = mode
        out = np.empty(out_shape, arrays[0].dtype)
        step = bound_kernel(backend.kernel(op), backend, array_types(arrays),
                            array_types([out]), attrs)
        step(KernelContext(np, np.random.default_rng(0), backend), arrays, [out], attrs)
        return out

    want = run([a.astype(np.float64) for a in inputs], "0")
    scale = np.abs(want).max()
    errors = {MODE_NAMES[mode]: float(f"{np.abs(run(inputs, mode) - want).max() / scale:.3g}")
              for mode in ("0", "default")}
    os.environ.pop(ENV, None)
    return errors


def training_part(rounds: int) -> dict:
    """The CIFAR ResNet-18 training step of benchmarks/hybridize.py (batch 32, hybridized).

    Accuracy per kernel: each 3x3 stride-1 Conv shape's forward (Conv), dX (ConvTranspose)
    and dW (ConvGradWeight) on random float32 data, Winograd off and by default, against the
    same kernel in float64 (``_kernel_errors``). And per model: each parameter's gradient
    against the same net and batch in float64, as ||g - g64|| / ||g64||, the largest over
    the parameters. That figure measures the net as much as the kernels: a pre-activation
    within rounding of zero takes the other side of ReLU's kink under any change of summation
    order (even one BLAS thread against two), which moves its element's gradient by the whole
    incoming value. ``float64_input_moved`` gives the scale: the same figure for the float64
    net itself, its input moved by 1e-6 and 1e-5 of each value. Then the step time off and by
    default."""
    import numpy as np

    import portable as pt
    from benchmarks.hybridize import _batch, build_portable, portable_step
    from portable import autograd, gluon
    from portable.ops import registry

    def attrs(op):
        given = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
        return {key: given.get(key, spec.default) for key, spec in registry.get(op).attrs.items()}

    rng = np.random.default_rng(0)
    kernels = []
    for c, size in RESNET18_CIFAR:
        x, dy = (rng.standard_normal((TRAINING_BATCH, c, size, size)).astype(np.float32)
                 for _ in range(2))
        w = rng.standard_normal((c, c, 3, 3)).astype(np.float32)
        kernels.append({"channels": c, "size": size, "max_relative_error": {
            "forward": _kernel_errors("Conv", [x, w], x.shape, attrs("Conv")),
            "dx": _kernel_errors("ConvTranspose", [dy, w], x.shape, attrs("ConvTranspose")),
            "dw": _kernel_errors("portable.ConvGradWeight", [x, dy], w.shape,
                                 attrs("portable.ConvGradWeight"))}})
        print(json.dumps(kernels[-1]), flush=True)

    x_host, y_host = _batch("resnet18")

    def gradients(dtype, start=None, x_host=x_host):
        net = build_portable("resnet18")
        pt.random.seed(0)
        net.initialize(pt.init.Xavier())
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        x, y = pt.nd.array(x_host, dtype=dtype), pt.nd.array(y_host)
        if start is None:
            net(x)  # (deferred initialisation)
        else:
            net.cast(dtype)
            net(x)
            for param, values in zip(net.collect_params().values(), start):
                param.set_data(pt.nd.array(values, dtype=dtype))
        net.hybridize()
        loss_fn.hybridize()
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        params = list(net.collect_params().values())
        return ([p.data().asnumpy() for p in params],
                [p.grad().asnumpy() for p in params if p.grad_req != "null"])

    os.environ[ENV] = "0"
    start, off = gradients(np.float32)
    _, reference = gradients(np.float64, start)
    os.environ.pop(ENV, None)
    _, default = gradients(np.float32)

    def worst(grads) -> float:
        """The largest over the parameters (the nets list them in the same order)."""
        error = max(np.linalg.norm(g - want) / np.linalg.norm(want)
                    for g, want in zip(grads, reference))
        return float(f"{error:.3g}")

    moved = {}
    for size in (1e-6, 1e-5):
        x_moved = x_host * (1 + size * rng.standard_normal(x_host.shape))
        moved[f"{size:g}"] = worst(gradients(np.float64, start, x_moved)[1])

    steps = {}
    for mode in ("0", "default"):  # (the path is chosen when the net's plan is prepared)
        if mode == "default":
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = mode
        steps[MODE_NAMES[mode]] = portable_step("resnet18", True)
        steps[MODE_NAMES[mode]][0]()
    os.environ.pop(ENV, None)

    def timed(step):
        def run():
            step[0]()
            step[1]()
        return run

    t = _median_rounds({name: timed(step) for name, step in steps.items()}, rounds)
    row = {"model": "resnet18 (CIFAR, batch 32, training step)", "kernels": kernels,
           "gradient_relative_norm_error": {"off": worst(off), "default": worst(default),
                                            "float64_input_moved": moved},
           "step_ms": {k: round(v * 1e3, 1) for k, v in t.items()},
           "speedup_default": round(t["off"] / t["default"], 3)}
    print(json.dumps({k: v for k, v in row.items() if k != "kernels"}), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", nargs="+", default=["shapes", "models"],
                        choices=["shapes", "models", "training"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--models", nargs="*", default=[])
    parser.add_argument("--weights", nargs="+", default=["shipped", "random"],
                        choices=["shipped", "random"])
    args = parser.parse_args()
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
    except ImportError:
        pass  # OPENBLAS_NUM_THREADS above already holds
    result = {"machine": platform.processor() or platform.machine(),
              "cpus": os.cpu_count(), "blas_threads": 1}
    if "shapes" in args.part:
        result["shapes"] = shapes_part(args.batches, args.rounds)
    if "models" in args.part:
        result["models"] = models_part(args.models, args.rounds, args.weights)
    if "training" in args.part:
        result["training"] = training_part(args.rounds)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
