"""Regenerate ``android_demo/samples/``: held-out digit images for the on-device demo.

The samples come from the test part of the split that ``portable train --dataset digits``
holds out (``portable.data.digits.load_digits_split(test_fraction=0.2, seed=0)``), so the
trained model has never seen them: the first three images of each digit, 30 in all.

What is written (all readable by NumPy without pickle, and by a person):

- ``NN-labelD.pgm``: the raw 8x8 image as a plain (ASCII) PGM with grey levels 0..16, the
  values scikit-learn ships; open it in any image viewer or a text editor.
- ``normalization.npz``: ``mean`` and ``std`` (float32, 1x8x8): the per-pixel statistics of
  the *training* part that ``portable train`` standardises with. A sample becomes a model input
  as ``((pixels / 16) - mean) / std``, exactly as in training.
- ``samples.json``: per file its label and its index in the test split and in the dataset.

Needs scikit-learn (for the digits data); the demo itself needs only NumPy.

    $ python android_demo/make_samples.py [--per-digit 3] [--out android_demo/samples]
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from portable.data.digits import load_digits_split  # noqa: E402
from portable.io.atomic import atomic_write_bytes, atomic_write_text  # noqa: E402

TEST_FRACTION, SEED, MAXVAL = 0.2, 0, 16


def pgm_text(pixels: np.ndarray, comment: str) -> str:
    """An image of integers 0..MAXVAL as plain PGM (P2) text."""
    height, width = pixels.shape
    rows = "\n".join(" ".join(f"{int(v):2d}" for v in row) for row in pixels)
    return f"P2\n# {comment}\n{width} {height}\n{MAXVAL}\n{rows}\n"


def training_statistics(x_train_unit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean and std ``load_digits_split(standardize=True)`` applies (checked below)."""
    return x_train_unit.mean(axis=0), x_train_unit.std(axis=0) + np.float32(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-digit", type=int, default=3, help="samples of each digit")
    parser.add_argument("--out", default=str(HERE / "samples"), help="output folder")
    args = parser.parse_args(argv)

    raw = load_digits_split(TEST_FRACTION, SEED, standardize=False)  # pixels / 16
    standard = load_digits_split(TEST_FRACTION, SEED, standardize=True)
    mean, std = training_statistics(raw.x_train)
    # The demo's preprocessing must give the very inputs training evaluates on.
    np.testing.assert_array_equal((raw.x_test - mean) / std, standard.x_test)
    order = np.random.default_rng(SEED).permutation(len(raw.y_train) + len(raw.y_test))
    test_indices = order[:len(raw.y_test)]  # the dataset index of each test image

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.pgm"):
        stale.unlink()
    picked = [int(i) for digit in range(10)
              for i in np.flatnonzero(raw.y_test == digit)[:args.per_digit]]
    entries = []
    for number, index in enumerate(picked):
        label = int(raw.y_test[index])
        pixels = np.rint(raw.x_test[index, 0] * MAXVAL).astype(np.int64)
        name = f"{number:02d}-label{label}.pgm"
        comment = (f"scikit-learn digits #{int(test_indices[index])}, test-split index "
                   f"{index}, label {label}")
        atomic_write_text(out / name, pgm_text(pixels, comment))
        entries.append({"file": name, "label": label, "test_index": index,
                        "dataset_index": int(test_indices[index])})
    buffer = io.BytesIO()
    np.savez(buffer, mean=mean.astype(np.float32), std=std.astype(np.float32))
    atomic_write_bytes(out / "normalization.npz", buffer.getvalue())
    manifest = {
        "source": f"scikit-learn digits, test part of load_digits_split(test_fraction="
                  f"{TEST_FRACTION}, seed={SEED}) (never trained on)",
        "image": {"height": 8, "width": 8, "maxval": MAXVAL, "format": "plain PGM (P2)"},
        "preprocessing": "x = pixels / 16; x = (x - mean) / std with mean and std from "
                         "normalization.npz (training-part statistics); shape 1x1x8x8 float32",
        "samples": entries,
    }
    atomic_write_text(out / "samples.json", json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(entries)} samples, normalization.npz and samples.json to "
          f"{os.path.relpath(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
