"""Early stopping under ``dist_sync`` when the workers' own records disagree: every worker
takes rank 0's decision, so none stops alone while the others wait for it (before, the job
hung until the store's timeout named the missing rank)."""
from __future__ import annotations

from tests.kvstore.mpi import SCRIPTS, check, needs_mpi, run_ranks
from tests.kvstore.mpi_scripts import common

pytestmark = needs_mpi


def test_every_worker_stops_when_rank_0_says_so_and_only_then(tmp_path):
    check(run_ranks(2, [str(SCRIPTS / "early_stop.py"), str(tmp_path)],
                    env={"PORTABLE_KV_TIMEOUT": "30"}, timeout=120))
    results = common.read_results(str(tmp_path), 2)
    for result in results:
        assert result["rank1_wants_to_stop"] == {"epochs": 4, "stopped_early": False}
        assert result["rank0_wants_to_stop"] == {"epochs": 2, "stopped_early": True}
