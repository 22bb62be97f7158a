"""Training step time of Gluon blocks, imperative vs hybridized, beside PyTorch (when installed),
measured in the same run; prints JSON.

A step is forward + softmax cross-entropy + backward + a plain SGD update
(``w -= lr * g``, two ops per parameter in every framework). Models: an MLP 784-512-512-10
(batch 128), a LeNet (conv 20x5x5, pool, conv 50x5x5, pool, dense 500, dense 10; batch 64,
1x28x28 inputs) and the CIFAR ResNet-18 (``resnet18``: 3x3 stem of 64, four stages of two
basic blocks of 64-512 channels with batch norm, global average pooling, dense 10; batch 32,
3x32x32 inputs; BatchNorm uses the batch statistics, as in training, in both frameworks). Each figure is the median over ``--repeats`` runs of ``--steps`` steps (the
engine is drained at the end of each run; the frameworks take turns within each repeat, so
load on the machine affects them alike), at 1 and 2 threads (BLAS threads through
threadpoolctl, ``torch.set_num_threads`` for PyTorch).

Usage:
    python benchmarks/hybridize.py [--models mlp lenet resnet18] [--threads 1 2]
                                   [--repeats 5] [--steps 10] [--profile]

The default models are the MLP and the LeNet; ``resnet18`` takes about a second per step on
two cores (``--models resnet18 --repeats 3 --steps 3`` runs in about 3 minutes).

For the MLP, ``numpy_gemm_ms``/``torch_gemm_ms`` time a step's eight matrix products alone
(bare NumPy / PyTorch calls): the floor that BLAS sets for each framework.

``--profile`` adds, per model, the functions with the most own time in hybridized steps
(cProfile, on the naive engine so that kernels run on the profiled thread, at the smallest
thread count), to see what dominates the gap.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import portable as pt  # noqa: E402
from portable import autograd, gluon  # noqa: E402
from portable.gluon import nn  # noqa: E402

LR = 1e-4  # on the summed loss: small enough that ~100 steps stay finite
MODELS = {"mlp": {"batch": 128, "shape": (784,)}, "lenet": {"batch": 64, "shape": (1, 28, 28)},
          "resnet18": {"batch": 32, "shape": (3, 32, 32)}}
DEFAULT_MODELS = ["mlp", "lenet"]
RESNET18_CHANNELS = (64, 128, 256, 512)


def build_portable(name: str) -> gluon.HybridBlock:
    if name == "resnet18":
        from portable.models.zoo import resnet_small

        return resnet_small(10, RESNET18_CHANNELS, blocks=2)
    net = nn.HybridSequential()
    with net.name_scope():
        if name == "mlp":
            net.add(nn.Dense(512, activation="relu"), nn.Dense(512, activation="relu"),
                    nn.Dense(10))
        else:
            net.add(nn.Conv2D(20, kernel_size=5, activation="relu"), nn.MaxPool2D(2),
                    nn.Conv2D(50, kernel_size=5, activation="relu"), nn.MaxPool2D(2),
                    nn.Dense(500, activation="relu"), nn.Dense(10))
    return net


def build_torch(name: str):
    import torch

    if name == "resnet18":
        return torch_resnet18()
    if name == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                   torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                   torch.nn.Linear(512, 10))
    return torch.nn.Sequential(torch.nn.Conv2d(1, 20, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Conv2d(20, 50, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                               torch.nn.Flatten(), torch.nn.Linear(800, 500), torch.nn.ReLU(),
                               torch.nn.Linear(500, 10))


def torch_resnet18():
    """The same CIFAR ResNet-18 as ``portable.models.zoo.resnet_small(10, (64, 128, 256, 512),
    blocks=2)``, layer for layer."""
    import torch
    from torch import nn as tnn

    class Block(tnn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.body = tnn.Sequential(
                tnn.Conv2d(cin, cout, 3, stride, 1, bias=False), tnn.BatchNorm2d(cout),
                tnn.ReLU(), tnn.Conv2d(cout, cout, 3, 1, 1, bias=False), tnn.BatchNorm2d(cout))
            self.shortcut = None
            if stride != 1 or cin != cout:
                self.shortcut = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False),
                                               tnn.BatchNorm2d(cout))

        def forward(self, x):
            residual = x if self.shortcut is None else self.shortcut(x)
            return torch.relu(self.body(x) + residual)

    layers = [tnn.Conv2d(3, 64, 3, 1, 1, bias=False), tnn.BatchNorm2d(64), tnn.ReLU()]
    previous = RESNET18_CHANNELS[0]
    for stage, width in enumerate(RESNET18_CHANNELS):
        for index in range(2):
            layers.append(Block(previous, width, 2 if stage and not index else 1))
            previous = width
    layers += [tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Linear(previous, 10)]
    return tnn.Sequential(*layers)


def _batch(name: str) -> tuple[np.ndarray, np.ndarray]:
    spec = MODELS[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((spec["batch"], *spec["shape"])).astype(np.float32)
    return x, rng.integers(0, 10, spec["batch"])


def median_steps(runners: dict, repeats: int, steps: int) -> dict[str, float]:
    """Median milliseconds per step of each ``name -> (step, drain)``. The runners take turns
    within every repeat, so a busy machine slows them alike."""
    for step, drain in runners.values():
        for _ in range(3):
            step()
        drain()
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, (step, drain) in runners.items():
            start = time.perf_counter()
            for _ in range(steps):
                step()
            drain()
            times[name].append((time.perf_counter() - start) / steps)
    return {name: round(statistics.median(t) * 1000, 3) for name, t in times.items()}


def portable_step(name: str, hybridize: bool):
    net = build_portable(name)
    pt.random.seed(0)
    net.initialize(pt.init.Xavier())
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    net.hybridize(hybridize)
    loss_fn.hybridize(hybridize)
    x_host, y_host = _batch(name)
    x, y = pt.nd.array(x_host), pt.nd.array(y_host)
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]

    def step() -> None:
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        for p in params:
            weight = p.data()
            pt.nd.sub(weight, p.grad() * LR, out=weight)

    return step, pt.nd.waitall


def torch_step(name: str):
    import torch

    torch.manual_seed(0)
    net = build_torch(name)
    x_host, y_host = _batch(name)
    x, y = torch.from_numpy(x_host), torch.from_numpy(y_host)
    params = list(net.parameters())

    def step() -> None:
        for p in params:
            p.grad = None
        loss = torch.nn.functional.cross_entropy(net(x), y, reduction="sum")
        loss.backward()
        with torch.no_grad():
            for p in params:
                p.sub_(p.grad * LR)

    return step, lambda: None


def gemm_floor(name: str):
    """The MLP's eight matrix products of one step (3 forward; dW, dX of the top two layers
    and dW of the first) as bare NumPy and PyTorch calls: the part of a step that no
    framework overhead explains."""
    if name != "mlp":
        return {}
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 784), dtype=np.float32)
    ws = [rng.standard_normal(s, dtype=np.float32) for s in ((512, 784), (512, 512), (10, 512))]
    dy = rng.standard_normal((128, 10), dtype=np.float32)

    def products(x, ws, dy):
        h1 = x @ ws[0].T
        h2 = h1 @ ws[1].T
        h2 @ ws[2].T
        d2 = dy @ ws[2]
        d1 = d2 @ ws[1]
        return dy.T @ h2, d2.T @ h1, d1.T @ x

    runners = {"numpy_gemm": (lambda: products(x, ws, dy), lambda: None)}
    try:
        import torch
    except ImportError:
        return runners
    tx, tws, tdy = torch.from_numpy(x), [torch.from_numpy(w) for w in ws], torch.from_numpy(dy)
    runners["torch_gemm"] = (lambda: products(tx, tws, tdy), lambda: None)
    return runners


@contextlib.contextmanager
def threads(count: int):
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        limit = contextlib.nullcontext()
    else:
        limit = threadpool_limits(count)
    torch_threads = None
    try:
        import torch

        torch_threads = torch.get_num_threads()
        torch.set_num_threads(count)
    except ImportError:
        pass
    with limit:
        yield
    if torch_threads is not None:
        import torch

        torch.set_num_threads(torch_threads)


def profile_hybridized(name: str, steps: int) -> list[str]:
    """The functions with the most own time in hybridized steps. The naive engine runs every
    op on this thread, so kernels show up beside the Python work around them."""
    from portable.engine import use_engine

    with use_engine("naive"):
        step, drain = portable_step(name, True)
        for _ in range(3):
            step()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(steps):
            step()
        drain()
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
    lines = [line.strip() for line in out.getvalue().splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith("ncalls"))
    return lines[start:]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS, choices=list(MODELS))
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    results = []
    for name in args.models:
        for count in args.threads:
            with threads(count):
                runners = {"imperative": portable_step(name, False),
                           "hybridized": portable_step(name, True)}
                if torch_version is not None:
                    runners["torch"] = torch_step(name)
                runners.update(gemm_floor(name))
                times = median_steps(runners, args.repeats, args.steps)
            row = {"model": name, "batch": MODELS[name]["batch"], "threads": count,
                   **{f"{mode}_ms": value for mode, value in times.items()},
                   "imperative_over_hybridized": round(times["imperative"] /
                                                       times["hybridized"], 3)}
            if "torch" in times:
                row["hybridized_over_torch"] = round(times["hybridized"] / times["torch"], 3)
            results.append(row)
    report = {"benchmark": "hybridize", "engine": os.environ.get("PORTABLE_ENGINE", "threaded"),
              "numpy": np.__version__, "torch": torch_version, "python": platform.python_version(),
              "cpus": os.cpu_count(), "results": results,
              "targets": {name: "hybridized <= 1.0x torch" for name in MODELS}}
    if args.profile:
        with threads(min(args.threads)):
            report["profile_hybridized"] = {name: profile_hybridized(name, args.steps)
                                            for name in args.models}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
