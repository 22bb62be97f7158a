"""Rank script: train an MLP on digits with dist_async (parameter servers, optional groups).

Usage: async_digits.py OUT_DIR EPOCHS
Rank 0 writes OUT_DIR/rank0.json with the test accuracy and what it checked.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.repo_on_path()
import numpy as np  # noqa: E402

import portable as pt  # noqa: E402
from portable import distributed, gluon  # noqa: E402
from portable.data.digits import load_digits_split  # noqa: E402

out_dir, epochs = sys.argv[1], int(sys.argv[2])
kv = pt.kv.create("dist_async")
pt.random.seed(kv.rank)  # different initial weights: the servers' copy (rank 0's) must win
split = load_digits_split(seed=0)
mine = distributed.shard(len(split.x_train), kv)
x, y = split.x_train[mine], split.y_train[mine]
net = common.digits_mlp(64)
trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.003}, kvstore=kv)
common.train_digits(net, trainer, x, y, epochs, seed=kv.rank)
distributed.join(trainer)  # every worker pulls the servers' final weights
states = os.path.join(out_dir, "states.safetensors")
kv.save_optimizer_states(states)
kv.load_optimizer_states(states)
accuracy = common.held_out_accuracy(net, split)
weights = [p.data().asnumpy() for p in net.collect_params().values()]
common.write_result(out_dir, kv.rank, {
    "accuracy": accuracy, "workers": kv.num_workers, "group_size": kv.group_size,
    "checksum": float(sum(float(w.astype(np.float64).sum()) for w in weights)),
    "states_bytes": os.path.getsize(states)})
