"""Training memory: one SGD step (forward, gradients, momentum update) of a ResNet-style and a
VGG-style network, planned with every strategy beside the liveness lower bound, with and
without mirroring (recomputation, Chen et al. 2016); and what mirroring costs in time, measured
on smaller inputs that a CPU runs quickly (the fastest of ``--repeats`` steps, so that the
first step's one-off allocations do not count).

    $ python benchmarks/training_memory.py [--batch 32] [--image 224] [--timed-image 64]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from portable import symbol as sym  # noqa: E402
from portable.memory import training_profile  # noqa: E402
from portable.models.convnets import resnet, vgg  # noqa: E402

NETWORKS = {"resnet50": lambda: resnet(50), "vgg16": lambda: vgg(16),
            "resnet18": lambda: resnet(18), "vgg11": lambda: vgg(11)}


def loss_graph(name: str, batch: int, image: int):
    loss = sym.SoftmaxCrossEntropy(NETWORKS[name](), sym.var("label", dtype="int64"),
                                   name="loss")
    graph = loss.to_graph({"data": (batch, 3, image, image), "label": (batch,)},
                          {"label": np.int64})
    aux = set(loss.list_auxiliary_states())
    params = [n for n in loss.list_arguments() if n not in ("data", "label") and n not in aux]
    return graph, params


def planned(name: str, batch: int, image: int) -> dict:
    graph, params = loss_graph(name, batch, image)
    row = {}
    for mirror in (False, True):
        report = training_profile(graph, params, model=name, batch=batch, run=False,
                                  use_mirror=mirror).to_json()
        keys = ("naive_bytes", "inplace_bytes", "coshare_bytes", "both_bytes",
                "lower_bound_bytes", "planned_bytes", "naive_over_planned",
                "planned_over_bound", "categories", "weights_bytes", "optimizer_state_bytes")
        row["mirror" if mirror else "plain"] = {k: report[k] for k in keys}
        if mirror:
            row["mirror"]["recompute"] = report["extra"]["mirror"]
    row["mirror_saves"] = 1 - row["mirror"]["planned_bytes"] / row["plain"]["planned_bytes"]
    return row


def timed(name: str, batch: int, image: int, repeats: int) -> dict:
    graph, params = loss_graph(name, batch, image)
    row = {}
    for mirror in (False, True):
        report = training_profile(graph, params, model=name, batch=batch, use_mirror=mirror,
                                  repeats=repeats)
        measured = dict(report.measured)
        measured["planned_bytes"] = report.planned_bytes
        measured["predicted_peak_bytes"] = report.predicted_peak_bytes
        row["mirror" if mirror else "plain"] = measured
    plain, mirrored = row["plain"], row["mirror"]
    row["time_ratio_mirror_over_plain"] = mirrored["seconds"] / plain["seconds"]
    row["measured_peak_ratio_mirror_over_plain"] = (mirrored["measured_peak_bytes"]
                                                    / plain["measured_peak_bytes"])
    return row


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--planned", nargs="+", default=["resnet50", "vgg16"])
    parser.add_argument("--timed", nargs="+", default=["resnet18", "vgg11"])
    parser.add_argument("--timed-batch", type=int, default=8)
    parser.add_argument("--timed-image", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (fastest kept)")
    args = parser.parse_args(argv)
    result = {"benchmark": "training_memory",
              "planned": {f"{n}@{args.batch}x3x{args.image}x{args.image}":
                          planned(n, args.batch, args.image) for n in args.planned},
              "timed": {f"{n}@{args.timed_batch}x3x{args.timed_image}x{args.timed_image}":
                        timed(n, args.timed_batch, args.timed_image, args.repeats)
                        for n in args.timed}}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
