"""`portable train --kvstore dist_sync` under mpiexec: every rank trains on its shard, rank 0
writes the outputs, and the model learns."""
import json

from tests.kvstore.mpi import check, needs_mpi, run_ranks


@needs_mpi
def test_portable_train_data_parallel_on_two_ranks(tmp_path):
    job = check(run_ranks(2, ["-m", "portable.cli.main", "train", "--model", "mlp",
                              "--epochs", "3", "--kvstore", "dist_sync", "--no-progress",
                              "--json", "--out", str(tmp_path)], timeout=240))
    lines = [line for line in job.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, job.stdout  # only rank 0 reports
    summary = json.loads(lines[0])
    assert summary["steps"] == 3 * ((1438 // 2) // 32)  # each rank saw half the samples
    assert summary["test_accuracy"] >= 0.9
    assert (tmp_path / "model.params.safetensors").exists()
