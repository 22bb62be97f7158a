"""Rank script: the parameter server of an EASGD job dies (SIGKILL) at its 6th elastic exchange.

Run on every rank with PORTABLE_KV_SERVERS=1 (the last rank is the server: it runs this script
too, so that it can arm its own death). The workers train until the job is stopped.
"""
from __future__ import annotations

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.repo_on_path()
import portable as pt  # noqa: E402
from portable.kvstore import elastic  # noqa: E402
from portable.kvstore.comm import get_communicator  # noqa: E402

if get_communicator().is_server:
    offer = elastic.ElasticRounds.offer

    def dying_offer(self, *args, **kwargs):
        if self.exchanges >= 5:
            os.kill(os.getpid(), signal.SIGKILL)
        return offer(self, *args, **kwargs)

    elastic.ElasticRounds.offer = dying_offer
kv = pt.kv.create("dist_async", algorithm="easgd", tau=1, alpha=0.1)  # (a server serves here)
kv.set_optimizer(pt.optim.create("sgd", learning_rate=0.1))
w = pt.nd.zeros((10,))
kv.init("w", w)
for step in range(100_000):
    kv.pushpull("w", pt.nd.ones((10,)), out=w)
    w.wait_to_read()
print(f"rank {kv.rank} finished", flush=True)
