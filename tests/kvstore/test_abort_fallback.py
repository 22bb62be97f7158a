"""A rank that aborts the job ends even when MPI_Abort neither returns nor ends it (seen with
Open MPI's --enable-recovery when two ranks abort at once): its own fallback exits with the
abort's code after ``ABORT_GRACE_SECONDS``."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from portable.kvstore.comm import ABORT_GRACE_SECONDS, TIMEOUT_EXIT_CODE

CHILD = textwrap.dedent("""
    import time
    from types import SimpleNamespace
    from portable.kvstore.comm import Communicator

    stuck = SimpleNamespace(world=SimpleNamespace(Abort=lambda code: time.sleep(3600)))
    Communicator.abort(stuck)
""")


def test_a_stuck_mpi_abort_still_ends_the_process_with_its_code():
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=ABORT_GRACE_SECONDS + 60)
    assert done.returncode == TIMEOUT_EXIT_CODE, done.stderr
    assert time.monotonic() - started < ABORT_GRACE_SECONDS + 30
