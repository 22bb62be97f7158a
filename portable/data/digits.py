"""scikit-learn's bundled 8x8 digits (1,797 images, no download), split reproducibly.

Example:
    >>> from portable.data.digits import load_digits_split
    >>> split = load_digits_split(seed=0)
    >>> split.x_train.shape, split.x_test.shape
    ((1438, 1, 8, 8), (359, 1, 8, 8))
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Split:
    x_train: np.ndarray  # float32 (N, 1, 8, 8)
    y_train: np.ndarray  # int64 (N,)
    x_test: np.ndarray
    y_test: np.ndarray


def load_digits_split(test_fraction: float = 0.2, seed: int = 0,
                      standardize: bool = True) -> Split:
    """The digits data as NCHW float32 images with a fixed, seeded test split.

    Args:
        test_fraction: share of the 1,797 images held out for testing.
        seed: seeds the split.
        standardize: scale each pixel by the training set's mean and standard deviation
            (computed on the training part only); otherwise pixels are scaled to [0, 1].
    """
    raw_images, raw_labels = load_digits_arrays()
    images = (raw_images.astype(np.float32) / 16.0)[:, None, :, :]
    labels = raw_labels.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = int(round(len(labels) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    x_train, x_test = images[train], images[test]
    if standardize:
        # The +0.1 keeps always-blank border pixels from being divided by ~0.
        mean, std = x_train.mean(axis=0), x_train.std(axis=0) + np.float32(0.1)
        x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    return Split(x_train, labels[train], x_test, labels[test])


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 raw 8x8 images (values 0..16) and their labels, as scikit-learn bundles them.

    The CSV file inside the scikit-learn package is read directly: importing
    ``sklearn.datasets`` (and SciPy behind it) takes seconds, reading the file milliseconds.
    ``load_digits`` is the fallback when the file is not where it is expected.
    """
    spec = importlib.util.find_spec("sklearn")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            data = np.loadtxt(path, delimiter=",")
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.images, digits.target
