"""How far each MXNet tutorial script (``tests/mxnet_fidelity/tutorials/``) clears the accuracy
bar its test sets (the real MXNet 1.9.1's mean accuracy over its recorded seeds, less three
standard errors of a 360-image accuracy), over seeds; prints JSON.

The test runs every script once, at the seed written in it. A different seed (or another BLAS
kernel, which moves a training run as much) must not take a script below its bar, so this runs
each script that reports an accuracy with its ``mx.random.seed(...)`` set to each of the given
seeds and reports the lowest accuracy against the bar.

Usage:
    python benchmarks/tutorial_margin.py [--scripts t03_gluon_blocks ...] [--seeds 0 1 2 3 4]
    python benchmarks/tutorial_margin.py --python /path/to/mxnet-venv/bin/python --mxnet
        # the same seeds under the real MXNet (the script's imports turned back into mxnet)
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.mxnet_fidelity.test_tutorials import FIXTURE, accuracy_bar  # noqa: E402
from tests.mxnet_fidelity.tutorial_scripts import (FOLDER, SCRIPTS, as_mxnet,  # noqa: E402
                                                   is_seeded, run, source, with_seed)


def seeded_scripts() -> list[str]:
    """The scripts that report an accuracy and draw their initial weights from a seed."""
    return [name for name in SCRIPTS if is_seeded(source(name))
            and "accuracy" in FIXTURE["scripts"][name]["metrics"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scripts", nargs="*", default=None)
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--python", default=sys.executable, help="the interpreter to run with")
    parser.add_argument("--mxnet", action="store_true",
                        help="run the scripts as written for MXNet (import mxnet)")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copy(FOLDER / "digits_data.py", scratch)
        for name in args.scripts or seeded_scripts():
            bar = accuracy_bar(FIXTURE["scripts"][name])
            accuracies = {}
            for seed in args.seeds:
                text = with_seed(source(name), seed)
                script = Path(scratch) / f"{name}.py"
                script.write_text(as_mxnet(text) if args.mxnet else text)
                accuracies[seed] = run(script, python=args.python)["accuracy"]
                print(f"{name} seed {seed}: {accuracies[seed]:.4f}", file=sys.stderr)
            lowest = min(accuracies.values())
            results[name] = {"accuracies": accuracies, "lowest": lowest, "bar": bar,
                             "margin": lowest - bar}
    print(json.dumps({"framework": "mxnet" if args.mxnet else "portable", "seeds": args.seeds,
                      "scripts": results}, indent=1))


if __name__ == "__main__":
    main()
