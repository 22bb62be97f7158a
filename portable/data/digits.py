"""scikit-learn's bundled 8x8 digits (1,797 images, no download), split reproducibly.

Example:
    >>> from portable.data.digits import load_digits_split
    >>> split = load_digits_split(seed=0)
    >>> split.x_train.shape, split.x_test.shape
    ((1437, 1, 8, 8), (360, 1, 8, 8))
"""
from __future__ import annotations

from dataclasses import dataclass

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
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = int(round(len(labels) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    x_train, x_test = images[train], images[test]
    if standardize:
        # The +0.1 keeps always-blank border pixels from being divided by ~0.
        mean, std = x_train.mean(axis=0), x_train.std(axis=0) + np.float32(0.1)
        x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    return Split(x_train, labels[train], x_test, labels[test])
