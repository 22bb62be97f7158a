"""Rank script: ``portable.fit`` with early stopping on ``dist_sync``, where the workers' own
records disagree (tests/kvstore/test_early_stop_agreement.py).

Usage: early_stop.py OUT_DIR
Two runs of 4 epochs: in the first only rank 1's rule wants to stop (after epoch 2), in the
second only rank 0's. Every rank writes OUT_DIR/rank<r>.json with the epochs each run trained.
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
from portable.data import ArrayDataset, DataLoader  # noqa: E402
from portable.fit import EarlyStopping, fit  # noqa: E402


class StopAfter(EarlyStopping):
    """Says stop after epoch ``epoch`` on rank ``rank`` only (what each worker's own
    validation shard may say)."""

    def __init__(self, rank: int, epoch: int, mine: int) -> None:
        super().__init__("train_loss")
        self.rank, self.epoch, self.mine = rank, epoch, mine

    def update(self, record: dict) -> bool:
        super().update(record)
        return self.mine == self.rank and record["epoch"] >= self.epoch


out_dir = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.normal(size=(64, 5)).astype(np.float32)
y = (x.sum(axis=1) > 0).astype(np.int64)
epochs = {}
for run, stopper in (("rank1_wants_to_stop", 1), ("rank0_wants_to_stop", 0)):
    kv = pt.kv.create("dist_sync")  # (a store per Trainer: each initialises its keys)
    mine = distributed.shard(len(x), kv)
    pt.random.seed(0)
    net = gluon.nn.Dense(2)
    net.initialize(pt.init.Xavier())
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1}, kvstore=kv)
    result = fit(net, DataLoader(ArrayDataset(x[mine], y[mine]), 8), trainer=trainer, epochs=4,
                 progress=False, early_stopping=StopAfter(stopper, 2, kv.rank))
    epochs[run] = {"epochs": result["epochs"], "stopped_early": result["stopped_early"]}
common.write_result(out_dir, kv.rank, epochs)
