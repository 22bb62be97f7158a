"""Rank script: the same training steps on dist_sync, dist_async (sgd), local SGD and EASGD, to
compare the bytes each store moves (tests/kvstore/test_easgd.py).

Usage: traffic.py OUT_DIR STORE STEPS TAU
  STORE: dist_sync, or a dist_async algorithm (sgd, local_sgd, easgd).
Every rank writes OUT_DIR/rank<r>.json with the bytes moved by the steps (after init) and the
keys' total size.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.repo_on_path()
import numpy as np  # noqa: E402

import portable as pt  # noqa: E402

out_dir, store, steps, tau = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if store == "dist_sync":
    kv = pt.kv.create("dist_sync")
else:
    settings = {} if store == "sgd" else {"tau": tau}
    kv = pt.kv.create("dist_async", algorithm=store, **settings)
kv.set_optimizer(pt.optim.create("sgd", learning_rate=0.01))
sizes = {"a": 1000, "b": 3000}
weights = {k: pt.nd.zeros((n,)) for k, n in sizes.items()}
for k, w in weights.items():
    kv.init(k, w)
    kv.pull(k, out=w)
pt.nd.waitall()  # the init broadcasts are engine ops: count them before, not during, the steps
before = kv.traffic
for step in range(steps):
    for k, w in weights.items():
        kv.pushpull(k, pt.nd.ones((sizes[k],)), out=w)
        w.wait_to_read()
# A push's bytes are counted when its send completes, which may be after the pull that follows
# it has answered: let every engine op finish and every worker arrive before reading.
pt.nd.waitall()
kv.barrier()
after = kv.traffic
common.write_result(out_dir, kv.rank, {
    "sent": after["sent"] - before["sent"], "received": after["received"] - before["received"],
    "nbytes": int(sum(sizes.values()) * np.dtype(np.float32).itemsize)})
