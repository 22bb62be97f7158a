"""Rank script: save an EASGD or local SGD run mid-way with ``Trainer.save_states`` and resume it
in a fresh job with ``Trainer.load_states`` (tests/kvstore/test_easgd.py compares the two).

Usage: replica_checkpoint.py OUT_DIR full|resume ALGORITHM TAU GROUP_SIZE SYNC STEPS SAVE_AT
  full:   train STEPS steps, saving OUT_DIR/replicas.safetensors after step SAVE_AT;
  resume: start from other initial weights, load that file, train the remaining steps.
Batches depend on (rank, step) only. Every rank writes OUT_DIR/<phase>/rank<r>.json with its
replica when saved (full) or loaded (resume), its final replica, the centre and the step
counter.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.repo_on_path()
import numpy as np  # noqa: E402

import portable as pt  # noqa: E402
from portable import gluon  # noqa: E402
from portable.data.digits import load_digits_split  # noqa: E402

out_dir, phase, algorithm, tau, group_size, sync, steps, save_at = sys.argv[1:9]
tau, group_size, steps, save_at = int(tau), int(group_size), int(steps), int(save_at)
settings = {"algorithm": algorithm, "tau": tau, "group_size": group_size}
if algorithm == "easgd":
    settings.update(alpha=0.3, sync=sync == "sync")
kv = pt.kv.create("dist_async", **settings)
pt.random.seed(kv.rank + (0 if phase == "full" else 1000))  # resume: other weights, replaced
split = load_digits_split(seed=0)
net = common.digits_mlp(16)
trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.01}, kvstore=kv)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
path = os.path.join(out_dir, "replicas.safetensors")
batch = 16


def step(number: int) -> None:
    rows = ((number * kv.num_workers + kv.rank) * batch + np.arange(batch)) % len(split.x_train)
    x = pt.nd.array(split.x_train[rows])
    if number == 0 or phase == "resume" and number == save_at:
        net(x)  # (deferred shapes) the store is created at the first step or load
    with pt.autograd.record():
        loss = loss_fn(net(x), pt.nd.array(split.y_train[rows]))
    loss.backward()
    trainer.step(batch * kv.gradient_workers)


def replica() -> list:
    return [p.data().asnumpy().tolist() for p in trainer._params]


first, at_checkpoint = 0, None
if phase == "resume":
    net(pt.nd.array(split.x_train[:1]))  # shapes known: the store can be set up
    trainer.load_states(path)
    first, at_checkpoint = save_at, replica()
for number in range(first, steps):
    step(number)
    if phase == "full" and number + 1 == save_at:
        trainer.save_states(path)
        at_checkpoint = replica()
final = replica()
trainer.pull_center()
os.makedirs(os.path.join(out_dir, phase), exist_ok=True)
common.write_result(os.path.join(out_dir, phase), kv.rank, {
    "at_checkpoint": at_checkpoint, "replica": final, "centre": replica(),
    "steps": kv.steps(0), "group": kv.group})
