"""Run this rank as a ``dist_async`` parameter server until every worker is done.

``portable launch --servers K`` starts the last K ranks with this module, so the training script
never runs on a server. (A script that creates ``dist_async`` on a server rank also becomes a
server there, then exits, as MXNet's did.)

Example:
    $ PORTABLE_KV_SERVERS=1 mpiexec -n 2 python train.py : -n 1 python -m portable.kvstore.server
"""
from __future__ import annotations

import sys

from portable.kvstore.ps import run_server

if __name__ == "__main__":
    sys.exit(run_server())
