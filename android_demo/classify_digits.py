"""Classify the bundled digit images on this device with a model from ``portable train``.

Needs only NumPy and portable (pyopencl for ``--device opencl``): this is the on-device half
of portable. Train on a computer (``portable train --model lenet --export lenet.portable``),
copy the model to the phone and run:

    $ python android_demo/classify_digits.py --model lenet.portable
    $ python android_demo/classify_digits.py --model lenet.onnx --device opencl --json

Prints per sample the true label, the predicted label and the latency, then the accuracy, the
median latency, the peak resident memory of this process and the memory the predictor planned
(refused before anything runs when it exceeds ``--memory-budget``). Exit code 2 on a model that
is refused (over budget, corrupted, not a digits model).

The samples (``samples/*.pgm``, 8x8, grey levels 0..16) are held out from training; each is
standardised with the training statistics in ``samples/normalization.npz``, exactly as
``portable train`` does.
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("portable") is None:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parent))
# On a phone numba is absent; where it is installed, its compiled tier (about 70 MB) stays off
# here too unless PORTABLE_JIT=1: this demo is about running in little memory.
os.environ.setdefault("PORTABLE_JIT", "0")

from portable.predict import peak_resident_bytes  # noqa: E402
from portable.errors import PortableError, SerializationError  # noqa: E402
from portable.predict import Predictor, format_bytes  # noqa: E402

SAMPLES = HERE / "samples"
LABEL = re.compile(r"label(\d+)")
PGM_TOKEN = re.compile(rb"\s*(#[^\n]*\n\s*)*(\S+)")  # a header field after comments
# What the demo runs on: the CPU unless asked; "auto" takes OpenCL when it is usable here.
DEFAULT_DEVICE = "cpu"
DEVICE_CHOICES = "cpu, opencl, opencl:N or auto"


def read_pgm(path: Path) -> tuple[np.ndarray, int]:
    """A PGM image (plain P2 or binary P5) as an integer array and its maximum grey level."""
    data = path.read_bytes()
    # Header: magic, width, height, maxval, separated by whitespace; '#' starts a comment.
    tokens, pos = [], 0
    while len(tokens) < 4:
        match = PGM_TOKEN.match(data, pos)
        if match is None:
            raise SerializationError(f"{path}: not a PGM image (header ends early)")
        tokens.append(match.group(2))
        pos = match.end()
    try:
        magic, width, height, maxval = tokens[0], *(int(t) for t in tokens[1:])
    except ValueError:
        raise SerializationError(f"{path}: not a PGM image (header {tokens})") from None
    if magic == b"P2":
        pixels = np.array(data[pos:].split()[:width * height], dtype=np.int64)
    elif magic == b"P5":
        dtype = np.uint8 if maxval < 256 else np.dtype(">u2")
        pixels = np.frombuffer(data, dtype, width * height, pos + 1).astype(np.int64)
    else:
        raise SerializationError(f"{path}: not a PGM image (magic {magic!r}, want P2 or P5)")
    if pixels.size != width * height:
        raise SerializationError(f"{path}: {pixels.size} pixels, expected {width}x{height}")
    return pixels.reshape(height, width), maxval


def load_samples(folder: Path = SAMPLES) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The model inputs (N, 1, H, W) float32, the true labels and the file names.

    Each image becomes ``((pixels / maxval) - mean) / std`` with the training statistics of
    ``normalization.npz``: the inputs ``portable train`` evaluates on. Labels come from the
    file names (``...labelD...pgm``).
    """
    files = sorted(folder.glob("*.pgm"))
    if not files:
        raise PortableError(f"no .pgm samples in {folder}; run android_demo/make_samples.py")
    with np.load(folder / "normalization.npz", allow_pickle=False) as stats:
        mean, std = stats["mean"], stats["std"]
    images, labels = [], []
    for path in files:
        pixels, maxval = read_pgm(path)
        label = LABEL.search(path.name)
        if label is None:
            raise PortableError(f"{path}: the file name must hold the label, e.g. 07-label3.pgm")
        images.append((pixels.astype(np.float32) / np.float32(maxval))[None])
        labels.append(int(label.group(1)))
    inputs = (np.stack(images) - mean) / std
    return inputs.astype(np.float32), np.array(labels), [p.name for p in files]


def pick_device(spec: str = DEFAULT_DEVICE) -> str:
    """The device to run on: ``spec`` itself, or for ``auto`` OpenCL when its backend loads
    here (pyopencl and a driver), else the CPU."""
    if spec != "auto":
        return spec
    from portable.device import as_device

    try:
        as_device("opencl").backend
    except PortableError:
        return "cpu"
    return "opencl"


def classify(model: str, device: str = DEFAULT_DEVICE, memory_budget: str | None = "64MB",
             samples: Path = SAMPLES) -> tuple[dict, dict]:
    """Classify every sample one at a time (batch 1, as an app would).

    Returns the report (JSON-ready) and the arrays (inputs, labels, outputs by name).
    """
    inputs, labels, names = load_samples(samples)
    started = time.perf_counter()
    predictor = Predictor(model, device=pick_device(device), batch_size=1,
                          memory_budget=memory_budget)
    load_ms = 1e3 * (time.perf_counter() - started)
    name = predictor.input_names[0]
    expected = tuple(predictor.input_types[name].shape)
    if len(predictor.input_names) != 1 or expected not in (inputs.shape[1:],
                                                           (1, *inputs.shape[1:])):
        raise PortableError(
            f"{model} takes inputs {[str(predictor.input_types[n]) for n in predictor.input_names]}"
            f"; the samples are 1x{'x'.join(map(str, inputs.shape[1:]))} digit images: use a "
            f"model trained with `portable train --dataset digits`")
    rows, outputs = [], []
    for image, label, file in zip(inputs, labels, names):
        began = time.perf_counter()
        result = predictor.predict(image.reshape(expected))
        latency = 1e3 * (time.perf_counter() - began)
        outputs.append(result)
        rows.append({"file": file, "label": int(label), "predicted": int(np.argmax(result[0])),
                     "latency_ms": round(latency, 4)})
    peak, source = peak_resident_bytes()
    correct = sum(r["label"] == r["predicted"] for r in rows)
    report = {
        "model": str(model), "device": str(predictor.device), "load_ms": round(load_ms, 3),
        "samples": rows, "correct": correct, "accuracy": correct / len(rows),
        "median_latency_ms": round(statistics.median(r["latency_ms"] for r in rows), 4),
        "peak_resident_bytes": peak, "peak_resident_source": source,
        "memory": dict(predictor.memory),
        # top-level modules this process loaded: shows that prediction needs NumPy alone
        "modules": sorted({m.partition(".")[0] for m in sys.modules}),
    }
    arrays = {"inputs": inputs, "labels": labels}
    for i, output_name in enumerate(predictor.output_names):
        arrays[f"outputs/{output_name}"] = np.concatenate([o[i] for o in outputs])
    return report, arrays


def _print(report: dict) -> None:
    memory = report["memory"]
    budget = memory.get("budget_bytes")
    print(f"{os.path.basename(report['model'])} on {report['device']}, loaded in "
          f"{report['load_ms']:.1f} ms; memory budget "
          f"{format_bytes(budget) if budget is not None else 'none'}")
    print(f"{'sample':<16} {'true':>4} {'predicted':>9} {'latency':>11}")
    for row in report["samples"]:
        mark = "" if row["label"] == row["predicted"] else "  <- wrong"
        print(f"{row['file']:<16} {row['label']:>4} {row['predicted']:>9} "
              f"{row['latency_ms']:>8.3f} ms{mark}")
    peak = report["peak_resident_bytes"]
    print(f"accuracy {report['correct']}/{len(report['samples'])} = "
          f"{100 * report['accuracy']:.1f}%, median latency {report['median_latency_ms']:.3f} ms")
    print(f"peak resident memory {format_bytes(peak) if peak else 'unknown'} "
          f"({report['peak_resident_source']}); planned {format_bytes(memory['total_bytes'])} "
          f"= plan {format_bytes(memory['plan_bytes'])} + weights "
          f"{format_bytes(memory['weights_bytes'])} (mapped from the file: "
          f"{format_bytes(memory.get('mapped_weights_bytes', 0))}) + inputs "
          f"{format_bytes(memory['io_bytes'])}")


def _save(path: str, arrays: dict) -> None:
    from portable.io.atomic import atomic_write_bytes

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True,
                        help="a model from portable train: .portable (deployment) or .onnx")
    parser.add_argument("--device", default=DEFAULT_DEVICE, help=DEVICE_CHOICES)
    parser.add_argument("--memory-budget", default="64MB", metavar="SIZE",
                        help="refuse a model needing more (default 64MB; 'none' for no limit)")
    parser.add_argument("--samples", default=str(SAMPLES), help="folder of .pgm samples")
    parser.add_argument("--outputs", metavar="F.npz", help="write the inputs, labels and raw "
                        "model outputs (keys inputs, labels, outputs/<name>)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    budget = None if str(args.memory_budget).lower() == "none" else args.memory_budget
    try:
        report, arrays = classify(args.model, args.device, budget, Path(args.samples))
    except (PortableError, OSError) as exc:
        print(f"classify_digits: error: {exc}", file=sys.stderr)
        return 2
    if args.outputs:
        _save(args.outputs, arrays)
    if args.json:
        print(json.dumps(report))
    else:
        _print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
