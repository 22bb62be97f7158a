"""Rank script: EASGD or local SGD on a quadratic loss per worker, with hand-made gradients
pushed to the store (no autograd), for the closed forms of tests/kvstore/test_easgd.py.

Usage: replica_quadratic.py OUT_DIR ALGORITHM TAU GROUP_SIZE STEPS [ALPHA SYNC]
Worker r's loss is 0.5 * ||x - m_r||^2 (common.quadratic_target), trained with plain SGD
(learning rate common.QUADRATIC_LR) in float64. Every rank writes OUT_DIR/rank<r>.json with its
final replica, the centre (pull_center), the byte counters and its group.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.repo_on_path()
import numpy as np  # noqa: E402

import portable as pt  # noqa: E402

out_dir, algorithm, tau, group_size, steps = sys.argv[1:6]
settings = {"algorithm": algorithm, "tau": int(tau), "group_size": int(group_size)}
if algorithm == "easgd":
    settings.update(alpha=float(sys.argv[6]), sync=sys.argv[7] == "sync")
kv = pt.kv.create("dist_async", **settings)
kv.set_optimizer(pt.optim.create("sgd", learning_rate=common.QUADRATIC_LR))
start, target = common.quadratic_start(), common.quadratic_target(kv.rank)
keys = list(start)
# (rank 0's value must win)
replicas = {k: pt.nd.array(start[k] + kv.rank, dtype=np.float64) for k in keys}
for k in keys:
    kv.init(k, replicas[k])
    kv.pull(k, out=replicas[k])
after_init = kv.traffic
for _ in range(int(steps)):
    for k in keys:  # the gradient at this worker's current replica
        grad = pt.nd.array(replicas[k].asnumpy() - target[k], dtype=np.float64)
        kv.pushpull(k, grad, out=replicas[k])
centre = {k: pt.nd.zeros(start[k].shape, dtype=np.float64) for k in keys}
for k in keys:
    kv.pull_center(k, out=centre[k])
common.write_result(out_dir, kv.rank, {
    "replica": {k: replicas[k].asnumpy().tolist() for k in keys},
    "centre": {k: centre[k].asnumpy().tolist() for k in keys},
    "group": kv.group, "groups": kv.num_groups, "steps": kv.steps("w"),
    "after_init": after_init, "traffic": kv.traffic})
