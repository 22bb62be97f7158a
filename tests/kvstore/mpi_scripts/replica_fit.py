"""Rank script: train with ``portable.fit`` on an EASGD or local SGD store, writing checkpoints,
optionally resuming (tests/kvstore/test_easgd_fit_resume.py compares a run that was never
interrupted with one resumed from its checkpoints).

Usage: replica_fit.py OUT_DIR ALGORITHM SYNC EPOCHS [resume]
  OUT_DIR/checkpoints holds the checkpoints (one per epoch); every rank writes
  OUT_DIR/rank<r>.json with its replica after training and the centre (``pull_center``), by
  structural name as checkpoints hold them, its step counter, its group, its training losses
  and what ``fit`` says about the resume.
The group size comes from PORTABLE_KV_GROUP_SIZE; tau is 2. Each rank shuffles its shard with
the run's seed (restored on resume with the loader's position).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.repo_on_path()
import portable as pt  # noqa: E402
from portable import distributed, gluon  # noqa: E402
from portable.data import ArrayDataset, DataLoader  # noqa: E402
from portable.data.digits import load_digits_split  # noqa: E402
from portable.fit import fit  # noqa: E402
from portable.fit_state import params_by_name  # noqa: E402

out_dir, algorithm, sync, epochs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
resume = sys.argv[5:] == ["resume"]
settings = {"algorithm": algorithm, "tau": 2}
if algorithm == "easgd":
    settings.update(alpha=0.3, sync=sync == "sync")
kv = pt.kv.create("dist_async", **settings)
pt.random.seed(0)
split = load_digits_split(seed=0)
mine = distributed.shard(len(split.x_train), kv)
train = DataLoader(ArrayDataset(split.x_train[mine], split.y_train[mine]), 32, shuffle=True,
                   last_batch="discard")
net = gluon.nn.HybridSequential()
net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(10))
net.initialize(pt.init.Xavier())  # (deferred: the shapes come from the checkpoint on resume)
net.hybridize()
trainer = gluon.Trainer(net.collect_params(), "adam",
                        {"learning_rate": 0.01, "rescale_grad": 1.0 / kv.gradient_workers},
                        kvstore=kv)
result = fit(net, train, trainer=trainer, epochs=epochs, progress=False,
             checkpoint_dir=os.path.join(out_dir, "checkpoints"), resume=resume)


def values() -> dict:
    return {name: p.data().asnumpy().tolist() for name, p in params_by_name(net).items()}


replica = values()
trainer.pull_center()
common.write_result(out_dir, kv.rank, {
    "replica": replica, "centre": values(), "steps": kv.steps(0), "group": kv.group,
    "history": [r["train_loss"] for r in result["history"]],
    "resumed_from": result["resumed_from"], "refused": result["refused_checkpoints"]})
