"""Record what the real MXNet 1.9.1 reaches with an MXNet-style Module script (a symbol MLP
with SoftmaxOutput on scikit-learn's bundled digits, NDArrayIter, ``mod.fit`` with SGD, then
``mod.score``), the fixture ``test_module_api.py`` holds portable to:

    /tmp/mxvenv/bin/python tests/mxnet_fidelity/record_module_api.py \
        tests/mxnet_fidelity/fixtures/module_api.json

The script is ``SCRIPT`` below, run unchanged with ``mx`` bound to MXNet here and to portable in
the test. It is run for several seeds (initialisation differs between the two libraries'
generators, so what is compared is the accuracy reached, not the weights).
"""
from __future__ import annotations

import json
import platform
import sys

import numpy as np

SEEDS = (0, 1, 2)

SCRIPT = """
import numpy as np
from sklearn.datasets import load_digits

np.random.seed(seed)
mx.random.seed(seed)
digits = load_digits()
x = (digits.data / 16.0).astype(np.float32)
y = digits.target.astype(np.float32)
x_train, y_train, x_test, y_test = x[:1500], y[:1500], x[1500:], y[1500:]
train_iter = mx.io.NDArrayIter(x_train, y_train, batch_size=32, shuffle=True)
test_iter = mx.io.NDArrayIter(x_test, y_test, batch_size=32)

data = mx.sym.var('data')
fc1 = mx.sym.FullyConnected(data=data, num_hidden=64, name='fc1')
act1 = mx.sym.Activation(data=fc1, act_type='relu', name='relu1')
fc2 = mx.sym.FullyConnected(data=act1, num_hidden=10, name='fc2')
net = mx.sym.SoftmaxOutput(data=fc2, name='softmax')

mod = mx.mod.Module(symbol=net, context=mx.cpu())
mod.fit(train_iter, eval_data=None, optimizer='sgd',
        optimizer_params={'learning_rate': 0.1, 'momentum': 0.9},
        initializer=mx.init.Xavier(), eval_metric='acc', num_epoch=5)
accuracy = dict(mod.score(test_iter, 'acc'))['accuracy']
predictions = mod.predict(test_iter)
"""


# Callbacks as MXNet calls them: a Speedometer every 20 batches and a checkpoint every epoch.
CALLBACK_SCRIPT = SCRIPT.split("mod = mx.mod.Module")[0] + """
mod = mx.mod.Module(symbol=net, context=mx.cpu())
mod.fit(train_iter, optimizer='sgd', optimizer_params={'learning_rate': 0.1},
        initializer=mx.init.Xavier(), num_epoch=2,
        batch_end_callback=mx.callback.Speedometer(32, 20),
        epoch_end_callback=mx.callback.do_checkpoint(prefix, period=1))
"""


def normalized_log(messages: list[str], prefix: str) -> list[str]:
    """Log lines with the checkpoint prefix and every number masked (speeds, times and
    metric values differ from run to run)."""
    import re

    return [re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", m.replace(prefix, "PREFIX"))
            for m in messages]


def run_callbacks(mx, prefix: str) -> list[str]:
    """The log lines of ``CALLBACK_SCRIPT`` (root logger, INFO), normalised."""
    import logging

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__(logging.INFO)
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    keep = Keep()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(keep)
    root.setLevel(logging.INFO)
    try:
        exec(CALLBACK_SCRIPT, {"mx": mx, "seed": 0, "prefix": prefix})  # noqa: S102
    finally:
        root.removeHandler(keep)
        root.setLevel(old_level)
    return normalized_log(keep.messages, prefix)


def run(mx, seed: int) -> dict:
    scope = {"mx": mx, "seed": seed}
    exec(SCRIPT, scope)  # noqa: S102 - this repository's script
    return {"accuracy": float(scope["accuracy"]),
            "prediction_shape": list(scope["predictions"].shape),
            "label_names": scope["mod"].label_names,
            "output_names": scope["mod"].output_names,
            "output_shapes": [[n, list(s)] for n, s in scope["mod"].output_shapes],
            "params": {k: list(v.shape) for k, v in scope["mod"].get_params()[0].items()}}


def main() -> None:
    import mxnet as mx

    import os
    import tempfile

    answers = {str(seed): run(mx, seed) for seed in SEEDS}
    with tempfile.TemporaryDirectory() as folder:
        prefix = os.path.join(folder, "mlp")
        log = run_callbacks(mx, prefix)
        files = sorted(os.listdir(folder))
        # MXNet's own checkpoint and the predictions it makes with it, for portable to load
        scope = {"mx": mx, "seed": 0}
        exec(SCRIPT, scope)  # noqa: S102
        scope["mod"].save_checkpoint(os.path.join(os.path.dirname(sys.argv[1]), "module_api",
                                                  "mlp"), 5)
        first_rows = scope["predictions"][:8].asnumpy().tolist()
    fixture = {"recorded_with": {"mxnet": mx.__version__, "numpy": np.__version__,
                                 "python": platform.python_version()},
               "script": SCRIPT, "callback_script": CALLBACK_SCRIPT, "runs": answers,
               "callback_log": log, "callback_files": files,
               "checkpoint": {"prefix": "module_api/mlp", "epoch": 5,
                              "first_predictions": first_rows}}
    with open(sys.argv[1], "w") as handle:
        json.dump(fixture, handle, indent=1, sort_keys=True)
        handle.write("\n")


if __name__ == "__main__":
    main()
