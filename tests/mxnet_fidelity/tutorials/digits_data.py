"""The data every tutorial script trains on: scikit-learn's bundled 8x8 digits (no download),
split 1,437 / 360 by a fixed permutation, pixels scaled to [0, 1]. Plain NumPy, so the same
arrays reach MXNet and portable."""
import numpy as np
from sklearn.datasets import load_digits


def digits(images: bool = False):
    """(x_train, y_train, x_test, y_test) as float32 NumPy arrays; x as (N, 64), or as
    (N, 1, 8, 8) images."""
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    if images:
        x = x.reshape(-1, 1, 8, 8)
    y = data.target.astype(np.float32)
    order = np.random.RandomState(0).permutation(len(y))
    train, test = order[:1437], order[1437:]
    return x[train], y[train], x[test], y[test]


def report(**metrics) -> None:
    """The script's result: one JSON line, the last it prints."""
    import json

    print(json.dumps({k: float(v) for k, v in metrics.items()}))
