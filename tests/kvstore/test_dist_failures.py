"""A rank that stalls, dies or leaves early ends the job within the timeout with an error that
names the rank and the key the others wait for (never a silent hang)."""
from __future__ import annotations

import pytest

from tests.kvstore.mpi import SCRIPTS, needs_mpi, run_ranks

pytestmark = needs_mpi
FAILURE = str(SCRIPTS / "failure.py")
TIMEOUT_S = 4


def _flavor() -> str:
    from portable.distributed.launch import find_mpiexec, mpi_flavor

    return mpi_flavor(find_mpiexec())


def test_a_stalled_rank_stops_the_job_with_a_report_naming_rank_and_key():
    job = run_ranks(2, [FAILURE, "stall"], env={"PORTABLE_KV_TIMEOUT": str(TIMEOUT_S)},
                    timeout=90)
    assert job.returncode != 0
    assert job.seconds < TIMEOUT_S + 40  # the stalled rank would sleep 600 s
    assert "rank 0 (worker) timed out after" in job.stderr
    assert "for key 'w'" in job.stderr
    assert "rank 1: alive, not waiting in any kvstore operation; has not pushed key 'w'" \
        in job.stderr


def test_a_rank_leaving_early_is_named_with_the_hint_to_join():
    job = run_ranks(2, [FAILURE, "exit"], env={"PORTABLE_KV_TIMEOUT": str(TIMEOUT_S)},
                    timeout=90)
    assert job.returncode != 0
    assert "for key 'w'" in job.stderr
    assert "rank 1: finished its program" in job.stderr and "kv.join()" in job.stderr


def test_a_killed_rank_ends_the_job_at_once_naming_it():
    job = run_ranks(2, [FAILURE, "kill"], env={"PORTABLE_KV_TIMEOUT": "60"}, timeout=90)
    assert job.returncode != 0
    assert job.seconds < 40  # not the 60 s kvstore timeout: the MPI runtime ends the job
    assert "rank 1" in job.stderr


def test_a_killed_rank_is_reported_by_the_watchdog_when_mpi_keeps_the_job_alive():
    if _flavor() != "openmpi":
        pytest.skip("--enable-recovery (keep the job alive after a death) is an Open MPI option")
    job = run_ranks(2, [FAILURE, "kill"], env={"PORTABLE_KV_TIMEOUT": str(TIMEOUT_S)},
                    timeout=90, mpi_args=("--enable-recovery",))
    # (with --enable-recovery Open MPI's prterun exits 0 even after MPI_Abort)
    assert job.seconds < TIMEOUT_S + 40
    assert "for key 'w'" in job.stderr
    assert "rank 1: did not answer (dead" in job.stderr
