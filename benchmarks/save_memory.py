"""Peak memory of saving a model: how many bytes beyond the model's own arrays each of
portable's writers allocates while writing, beside safetensors' ``save_file`` (the library
made for the job) on the same arrays, in the same run. Prints one JSON object.

    python benchmarks/save_memory.py [--mb 64] [--tensors 16]

Writers measured, each to a fresh file in a temporary folder:

* ``deployment``: ``portable.predict.deployment.save`` (the ``.portable`` file);
* ``checkpoint``: ``portable.io.tensors.save_tensors`` (safetensors with a digest);
* ``parameters``: ``portable.gluon.parameter_dict.save_parameter_file`` (``save_parameters``);
* ``safetensors_save_file``: the peer.

Each writer runs in a fresh process of its own, which builds the arrays, then writes them.
The measure is the growth of the process's peak resident memory (``ru_maxrss``, everything:
Python, NumPy and the Rust inside safetensors) during the write, over the model's bytes: 0
means the writer streams, 1 means it held a second copy of the model in memory.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


WRITERS = ("deployment", "checkpoint", "parameters", "safetensors_save_file")


def measure(writer: str, path: str, mb: float, count: int) -> dict:
    """In this (fresh) process: build the arrays, write them with ``writer``, and report the
    growth of the peak resident memory during the write."""
    sys.path.insert(0, REPO)
    from safetensors.numpy import save_file

    from portable.ir.builder import GraphBuilder
    from portable.gluon.parameter_dict import save_parameter_file
    from portable.io.tensors import save_tensors
    from portable.predict.deployment import save

    rng = np.random.default_rng(0)
    numel = int(mb * (1 << 20) / 4 / count)
    tensors = {f"w{i}": rng.standard_normal(numel, np.float32) for i in range(count)}
    builder = GraphBuilder("saved")
    out = builder.input("x", (numel,), "float32")
    for name, array in tensors.items():
        out = builder.op("Add", out, builder.const(array, name))
    graph = builder.build([out])
    write = {"deployment": lambda: save(graph, path),
             "checkpoint": lambda: save_tensors(path, tensors, {"step": 1}),
             "parameters": lambda: save_parameter_file(path, tensors),
             "safetensors_save_file": lambda: save_file(tensors, path)}[writer]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    write()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"model_bytes": sum(a.nbytes for a in tensors.values()), "extra": after - before,
            "file_bytes": os.path.getsize(path)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=64.0, help="model size in MB")
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--writer", choices=WRITERS, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer:
        print(json.dumps(measure(args.writer, args.path, args.mb, args.tensors)))
        return
    report, model_bytes = {}, 0
    with tempfile.TemporaryDirectory() as folder:
        for writer in WRITERS:
            runs = []
            for _ in range(3):
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "--writer",
                                      writer, "--path", os.path.join(folder, writer),
                                      "--mb", str(args.mb), "--tensors", str(args.tensors)],
                                     capture_output=True, text=True, check=True)
                runs.append(json.loads(out.stdout))
            model_bytes = runs[0]["model_bytes"]
            extra = min(run["extra"] for run in runs)
            report[writer] = {"peak_extra_mb": round(extra / (1 << 20), 2),
                              "peak_extra_over_model": round(extra / model_bytes, 3),
                              "file_mb": round(runs[0]["file_bytes"] / (1 << 20), 2)}
    print(json.dumps({"benchmark": "save_memory", "model_mb": round(model_bytes / (1 << 20), 2),
                      "tensors": args.tensors, "writers": report}, indent=1))


if __name__ == "__main__":
    main()
