"""Rank script: train an MLP on digits with EASGD (allreduce groups, centre on the servers).

Usage: easgd_digits.py OUT_DIR EPOCHS TAU GROUP_SIZE
Every rank writes OUT_DIR/rank<r>.json with the test accuracy of its group's replica and of the
centre (pulled from the servers after training), and its byte counters.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.repo_on_path()
import portable as pt  # noqa: E402
from portable import distributed, gluon  # noqa: E402
from portable.data.digits import load_digits_split  # noqa: E402

out_dir, epochs, tau, group_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4])
kv = pt.kv.create("dist_async", algorithm="easgd", tau=tau, group_size=group_size)
pt.random.seed(kv.rank)  # different initial weights: rank 0's must win
split = load_digits_split(seed=0)
mine = distributed.shard(len(split.x_train), kv)
x, y = split.x_train[mine], split.y_train[mine]
net = common.digits_mlp(64)
trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01}, kvstore=kv)
# (the group sums its members' gradients)
common.train_digits(net, trainer, x, y, epochs, seed=kv.rank, summed=kv.gradient_workers)
replica_accuracy = common.held_out_accuracy(net, split)
kv.join()
for index, param in enumerate(trainer._params):
    kv.pull_center(index, out=param.list_data())
centre_accuracy = common.held_out_accuracy(net, split)
common.write_result(out_dir, kv.rank, {
    "replica_accuracy": replica_accuracy, "centre_accuracy": centre_accuracy,
    "group": kv.group, "groups": kv.num_groups, "alpha": kv.alpha, "traffic": kv.traffic})
