"""dist_async: parameter servers on dedicated ranks train an MLP on digits; with groups of 2
workers (the MXNET-MPI hybrid) too. Optimizer states are saved from the servers and loaded
back."""
from __future__ import annotations

import pytest

from tests.kvstore.mpi import SCRIPTS, check, needs_mpi, run_ranks
from tests.kvstore.mpi_scripts import common

pytestmark = needs_mpi
DIGITS = str(SCRIPTS / "async_digits.py")


@pytest.mark.parametrize("workers, group", [(2, 1), (4, 2)])
def test_dist_async_converges_on_digits(tmp_path, workers, group):
    check(run_ranks(workers, [DIGITS, str(tmp_path), "3"], servers=1,
                    env={"PORTABLE_KV_GROUP_SIZE": str(group)}, timeout=150))
    results = common.read_results(str(tmp_path), workers)
    for result in results:
        assert result["workers"] == workers and result["group_size"] == group
        assert result["accuracy"] >= 0.9  # chance is 0.1; one process reaches ~0.97
        assert result["states_bytes"] > 0
    # after join every worker holds the servers' final weights
    assert len({round(r["checksum"], 4) for r in results}) == 1


def test_dist_async_without_servers_needs_one_group(tmp_path):
    job = run_ranks(2, ["-c", "import portable as pt; pt.kv.create('dist_async')"], timeout=60)
    assert job.returncode != 0
    assert "no server ranks" in job.stderr and "--servers" in job.stderr
