"""How far each accuracy recipe clears its threshold, over seeds: the margin that makes the
accuracy tests and the README's main job independent of the BLAS kernel; prints JSON.

A recipe that passes on one seed and one BLAS kernel may sit on a knife's edge: the last bits
of rounding in one GEMM (OpenBLAS's Haswell and SkylakeX kernels sum in different orders) move
a chaotic training run as much as another seed does. So each recipe is trained for several
seeds (initialisation and shuffling; the test split stays fixed), and the figure that matters
is the lowest accuracy over them against the threshold its test asserts.

Recipes (each exactly what its test or command runs):
    gluon-lenet-imperative, gluon-lenet-hybridized  tests/gluon/test_training.py (>= 0.97)
    train-mlp, train-lenet                          ``portable train`` defaults (>= 0.97)
    symbol-mlp, symbol-lenet                        tests/executor/test_executor.py (>= 0.95)
    opencl-lenet                                    tests/backends/opencl/test_models.py
                                                    (>= 0.97; needs pyopencl, slow on PoCL)

Usage:
    python benchmarks/recipe_margin.py [--recipes ...] [--seeds 0 1 2 3 4]
    OPENBLAS_CORETYPE=Haswell python benchmarks/recipe_margin.py   # another GEMM kernel

One BLAS thread, as the tests run. Output: per recipe the accuracy of every seed, the lowest,
the threshold and ``margin = lowest - threshold`` (negative: the recipe fails for some seed),
with the BLAS kernel that ran (threadpoolctl).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import sys
import tempfile
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import portable as pt  # noqa: E402


def _gluon(hybridize: bool) -> Callable[[int], float]:
    def run(seed: int) -> float:
        from tests.gluon.test_training import train

        return train(hybridize, seed=seed)
    return run


def _cli(model: str) -> Callable[[int], float]:
    def run(seed: int) -> float:
        from portable.cli.main import main

        with tempfile.TemporaryDirectory() as out:
            stdout = io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
                code = main(["train", "--model", model, "--seed", str(seed), "--json",
                             "--no-progress", "--out", out])
            if code != 0:
                raise RuntimeError(f"portable train --model {model} exited with {code}")
            return json.loads(stdout.getvalue().strip().splitlines()[-1])["test_accuracy"]
    return run


def _symbolic(model: str, epochs: int, device: str = "cpu") -> Callable[[int], float]:
    def run(seed: int) -> float:
        from portable.data.digits import load_digits_split
        from portable.models.symbolic import SYMBOLIC_MODELS
        from portable.models.symbolic_training import train_classifier

        where = pt.opencl(0) if device == "opencl" else pt.cpu()
        return train_classifier(SYMBOLIC_MODELS[model](), load_digits_split(seed=0),
                                epochs=epochs, seed=seed, device=where)["test_accuracy"]
    return run


# name -> (run(seed) -> accuracy, the threshold its test asserts)
RECIPES: dict[str, tuple[Callable[[int], float], float]] = {
    "gluon-lenet-imperative": (_gluon(False), 0.97),
    "gluon-lenet-hybridized": (_gluon(True), 0.97),
    "train-mlp": (_cli("mlp"), 0.97),
    "train-lenet": (_cli("lenet"), 0.97),
    "symbol-mlp": (_symbolic("mlp", 30), 0.95),
    "symbol-lenet": (_symbolic("lenet", 8), 0.95),
    "opencl-lenet": (_symbolic("lenet", 20, "opencl"), 0.97),
}
DEFAULT = [name for name in RECIPES if name != "opencl-lenet"]


def blas_kernel() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl missing)"
    found = [i.get("architecture", "?") for i in threadpool_info() if i["user_api"] == "blas"]
    return ",".join(found) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", default=DEFAULT, choices=sorted(RECIPES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    report = {"blas_kernel": blas_kernel(),
              "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
              "machine": platform.processor() or platform.machine(), "recipes": {}}
    with threadpool_limits(1):
        for name in args.recipes:
            run, threshold = RECIPES[name]
            started = time.perf_counter()
            accuracies = {seed: round(run(seed), 4) for seed in args.seeds}
            lowest = min(accuracies.values())
            report["recipes"][name] = {
                "accuracy_by_seed": accuracies, "lowest": lowest, "threshold": threshold,
                "margin": round(lowest - threshold, 4),
                "seconds_per_run": round((time.perf_counter() - started) / len(args.seeds), 1)}
            print(json.dumps({name: report["recipes"][name]}), file=sys.stderr)
    report["all_clear"] = all(r["margin"] >= 0 for r in report["recipes"].values())
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
