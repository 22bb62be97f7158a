"""A small MLP ending in MXNet's custom softmax (``mx.operator.CustomOp``), trained on
scikit-learn's digits with plain SGD and autograd: the recipe that ``test_custom_op.py`` runs with
portable, and that this script runs with the real MXNet 1.9.1 to record its held-out accuracy:

    /tmp/mxvenv/bin/python tests/mxnet_fidelity/record_custom_op.py \
        tests/mxnet_fidelity/fixtures/custom_op_training.json

The recipe is written once, against ``mx`` (either library); weights start from a seeded NumPy
generator so both libraries start from the same point.
"""
from __future__ import annotations

import json
import platform
import sys

import numpy as np

HIDDEN, EPOCHS, BATCH, LR = 32, 8, 32, 0.5


def register_softmax(mx) -> None:
    """MXNet's example/numpy-ops/custom_softmax.py, registered as ``digits_softmax``."""

    class Softmax(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            x = in_data[0].asnumpy()
            y = np.exp(x - x.max(axis=1).reshape((x.shape[0], 1)))
            y /= y.sum(axis=1).reshape((x.shape[0], 1))
            self.assign(out_data[0], req[0], mx.nd.array(y))

        def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
            label = in_data[1].asnumpy().ravel().astype(np.int64)
            y = out_data[0].asnumpy()
            y[np.arange(label.shape[0]), label] -= 1.0
            self.assign(in_grad[0], req[0], mx.nd.array(y / label.shape[0]))

    @mx.operator.register("digits_softmax")
    class SoftmaxProp(mx.operator.CustomOpProp):
        def __init__(self):
            super().__init__(need_top_grad=False)

        def list_arguments(self):
            return ["data", "label"]

        def infer_shape(self, in_shape):
            return [in_shape[0], (in_shape[0][0],)], [in_shape[0]], []

        def create_operator(self, ctx, shapes, dtypes):
            return Softmax()


def digits():
    """Digits scaled to [0, 1], split 1400 train / rest held out (a fixed permutation)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.float32)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    return (x[:1400], y[:1400]), (x[1400:], y[1400:])


def train(mx) -> float:
    """Train the MLP with ``mx`` and return its held-out accuracy."""
    register_softmax(mx)
    (x_train, y_train), (x_test, y_test) = digits()
    rng = np.random.default_rng(1)
    shapes = [(x_train.shape[1], HIDDEN), (HIDDEN,), (HIDDEN, 10), (10,)]
    params = [mx.nd.array(rng.normal(0, 0.1, s).astype(np.float32)) for s in shapes]
    for p in params:
        p.attach_grad()

    def net(x):
        w1, b1, w2, b2 = params
        h = mx.nd.relu(mx.nd.dot(x, w1) + b1)
        return mx.nd.dot(h, w2) + b2

    for _ in range(EPOCHS):
        for start in range(0, len(x_train), BATCH):
            x = mx.nd.array(x_train[start:start + BATCH])
            label = mx.nd.array(y_train[start:start + BATCH])
            with mx.autograd.record():
                prob = mx.nd.Custom(net(x), label, op_type="digits_softmax")
            prob.backward()
            for p in params:
                p[:] = p - LR * p.grad
    prob = mx.nd.Custom(net(mx.nd.array(x_test)), mx.nd.array(y_test),
                        op_type="digits_softmax")
    return float((prob.asnumpy().argmax(axis=1) == y_test).mean())


def main() -> None:
    import mxnet as mx

    accuracy = train(mx)
    record = {"recorded_with": {"mxnet": mx.__version__, "numpy": np.__version__,
                                "python": platform.python_version()},
              "recipe": {"hidden": HIDDEN, "epochs": EPOCHS, "batch": BATCH, "lr": LR},
              "held_out_accuracy": accuracy}
    with open(sys.argv[1], "w") as handle:
        json.dump(record, handle, indent=1, sort_keys=True)
        handle.write("\n")


if __name__ == "__main__":
    main()
