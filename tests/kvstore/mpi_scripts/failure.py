"""Rank script: rank 1 stalls, dies or leaves early at step 3 of a dist_sync loop.

Usage: failure.py stall|kill|exit
"""
from __future__ import annotations

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.repo_on_path()
import portable as pt  # noqa: E402

mode = sys.argv[1]
kv = pt.kv.create("dist_sync")
kv.init("w", pt.nd.zeros((10,)))
for step in range(6):
    if step == 3 and kv.rank == 1:
        if mode == "stall":
            time.sleep(600)
        elif mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif mode == "exit":
            sys.exit(0)
    grad = pt.nd.ones((10,))
    kv.pushpull("w", grad)
    grad.wait_to_read()
print(f"rank {kv.rank} finished", flush=True)
