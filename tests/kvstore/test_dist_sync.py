"""dist_sync and dist_sync_hierarchical on 2 and 4 ranks on loopback: exact sums, training equal to
NumPy and to one process on the combined batch, uneven batches with join, compression against
NumPy closed forms, and checkpoints written by rank 0 and resumed by all.

Each fixture launches one job that runs several checks (launching is the slow part); every test
then checks one of them against a reference computed here.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from tests.kvstore.mpi import SCRIPTS, check, needs_mpi, run_python, run_ranks
from tests.kvstore.mpi_scripts import common

pytestmark = needs_mpi
SUITE = str(SCRIPTS / "sync_suite.py")


def _suite(tmp_path_factory, workers: int, checks: str, env: dict | None = None):
    out = tmp_path_factory.mktemp(f"sync{workers}")
    check(run_ranks(workers, [SUITE, str(out), checks], env=env, timeout=150))
    return out, common.read_results(str(out), workers)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    # hier_api here: the ranks sharing memory (all of them) form one node
    return _suite(tmp_path_factory, 2,
                  "api,linear,mlp,mlp_by_key,mlp_two_groups,uneven,2bit,fp16,checkpoint,store_update,hier_api,"
                  "speculate")


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    # tiny buckets: the 300k-element key is cut into 5 slices and small keys are fused;
    # pretend nodes of 2 ranks give the hierarchical store two levels on one machine
    return _suite(tmp_path_factory, 4, "api,linear,mlp,hier_api,hier_linear,uneven,mixed,speculate,"
                  "declared,hier_declared",
                  env={"PORTABLE_KV_BUCKET_MB": "0.25", "PORTABLE_KV_NODE_SIZE": "2"})


def linear_reference(workers: int, steps: list[int]) -> np.ndarray:
    """SGD with momentum and weight decay on least squares in float64; worker r takes
    steps[r] steps, a worker that stopped contributes nothing."""
    w0, x, t = common.linear_problem(workers)
    lr, momentum, wd = (common.LINEAR[k] for k in ("learning_rate", "momentum", "wd"))
    w, mom = w0.astype(np.float64), np.zeros(w0.shape)
    for step in range(max(steps)):
        rows = np.concatenate([common.shard_rows(r, workers, len(x))
                               for r in range(workers) if steps[r] > step])
        grad = (x[rows].astype(np.float64) @ w.T - t[rows]).T @ x[rows] / len(x) + wd * w
        mom = momentum * mom - lr * grad
        w = w + mom
    return w


def expected_api(workers: int) -> dict:
    scale = workers * (workers + 1) / 2 * workers  # two rounds: sum of (r+1), then times n
    sizes = {"0": 5, "1": 1, "big": 300_000, "3": 40_000}
    return {k: [0.0, (n - 1) * scale, scale * (n - 1) * n / 2] for k, n in sizes.items()}


def _check_api(results: list[dict], name: str, workers: int) -> None:
    expected = expected_api(workers)
    for r, result in enumerate(results):
        api = result[name]
        assert api["rank"] == r and api["workers"] == workers
        assert api["a"] == [7.0] * 3  # every rank starts from rank 0's value
        for key, (first, last, total) in expected.items():
            assert api["sums"][key] == pytest.approx([first, last, total], rel=1e-12), key
        # the summed values, summed once more over the workers
        assert api["produced"] == pytest.approx(
            [expected[str(k)][1] * workers for k in (0, 1, "big", 3)], rel=1e-12)
        # keys back to back in one buffer: the same sums, in no more calls than separately
        ranks_sum = workers * (workers + 1) / 2  # rank r sent arange(n) * (r + 1)
        assert api["packed"] == pytest.approx([(n - 1) * ranks_sum for n in (5, 1, 300_000,
                                                                             40_000)], rel=1e-12)
        assert api["packed_buckets"] <= api["separate_buckets"]
        for i, values in enumerate(api["single"]):
            assert values == [float(sum(rank + i for rank in range(workers)))] * (i + 1)
        assert api["pushed_unchanged"] == [float(r + 1)] * 5
        assert api["pulled"] == [workers * (workers + 1) / 2] * 5
        assert api["out"] == [workers * (workers - 1) / 2]
        assert api["bytes"] == f"from rank {workers - 1}"


@pytest.mark.parametrize("workers", [2, 4])
def test_pushpull_sums_exactly_and_init_comes_from_rank_0(two, four, workers):
    _, results = two if workers == 2 else four
    _check_api(results, "api", workers)


def test_small_keys_are_fused_into_fewer_collectives(two):
    stats = two[1][0]["api"]["stats"]
    # 4 list keys x 2 rounds + 20 per-key calls + 3 single calls = 31 reductions (plus the
    # broadcasts of 25 inits): fusion packs them into fewer collective calls
    assert 0 < stats["buckets"] < 31 + 25


@pytest.mark.parametrize("workers", [2, 4])
def test_trainer_on_dist_sync_matches_numpy_sgd(two, four, workers):
    _, results = two if workers == 2 else four
    expected = linear_reference(workers, [4] * workers)
    for result in results:
        np.testing.assert_allclose(result["linear"]["w"], expected, rtol=1e-4, atol=1e-5)


# the Trainer's pushpull calls for the MLP's keys (w1 448 B, b1 64 B, w2 192 B, b2 12 B)
# under each bucket: the whole model fits (one call); 300 B (the last three: 268 B); 105 B
# (every tensor is larger: key by key)
GROUPS = {"mlp": [[0, 1, 2, 3]], "mlp_two_groups": [[0], [1, 2, 3]],
          "mlp_by_key": [[0], [1], [2], [3]]}


@pytest.mark.parametrize("workers, how", [(2, "mlp"), (4, "mlp"), (2, "mlp_by_key"),
                                          (2, "mlp_two_groups")])
def test_mlp_on_dist_sync_equals_one_process_on_the_combined_batch(two, four, tmp_path, workers,
                                                                  how):
    """The Trainer pushes bucket-sized groups of keys, filled from the last layer back; one
    group, two, or key by key, the result equals one process on the whole batch."""
    _, results = two if workers == 2 else four
    check(run_python([SUITE, str(tmp_path), "mlp", "--local", str(workers)]))
    reference = common.read_results(str(tmp_path), 1)[0]["mlp"]
    for result in results:
        assert result[how + "_groups"] == GROUPS[how]
        if how == "mlp":  # the Trainer laid the gradients back to back in one buffer
            assert result["mlp_back_to_back"] is True
        got = result[how]  # (a second network in one process numbers its layers further on)
        assert len(got) == len(reference)
        for (name, values), mine in zip(sorted(reference.items()), sorted(got.items())):
            np.testing.assert_allclose(mine[1], values, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("check", ["declared", "hier_declared"])
def test_declared_groups_travel_as_one_request_and_sum_exactly(four, check):
    """Declared groups (one request each: a view of arrays back to back, or a packed copy of
    separate ones) and undeclared subsets (key by key), mixed round after round."""
    results = [result[check] for result in four[1]]
    assert len(results[0]["rounds"]) == 20
    assert len(results[0]["groups"]) == 8 and sum(map(len, results[0]["groups"])) == 24
    for result in results:  # 8 declared groups: 8 requests; an undeclared call of 3 keys: 3
        assert result["requests"] == [8, 3]
    for result in results:
        for round_, sums in enumerate(result["rounds"]):
            for key, values in sums.items():
                k = int(key)  # rank r sent (r + 1) * (k + 1) + round_ everywhere
                assert values == [sum((r + 1) * (k + 1) + round_ for r in range(4))], (round_, k)
    for result in results:  # another array of the wrong size in a group checked before
        key, size = result["wrong_key"], result["wrong_size"]
        assert result["wrong_error"] is not None, result
        assert (f"key {key} was initialised as float32[{size}], got float32[{size + 1}]"
                in result["wrong_error"]), result["wrong_error"]


@pytest.mark.parametrize("check", ["declared", "hier_declared"])
def test_a_group_declared_differently_on_one_worker_fails_on_every_worker(four, check):
    for result in four[1]:
        error = result[check]["error"]
        assert error is not None and "disagree on group #8" in error, error
        assert "rank(s) [1]" in error


def test_random_mixes_of_groups_keys_priorities_and_layouts_sum_exactly(four):
    for result in four[1]:
        rounds = result["mixed"]["rounds"]
        assert len(rounds) == 30
        for round_, sums in enumerate(rounds):
            for key, values in sums.items():
                k = int(key)  # rank r sent (r + 1) * (k + 1) + round_ everywhere
                assert values == [sum((r + 1) * (k + 1) + round_ for r in range(4))], (round_, k)



@pytest.mark.parametrize("workers", [2, 4])
def test_repeated_groups_are_guessed_in_one_collective_and_sum_exactly(two, four, workers):
    """Phases (see check_speculate): 10 rounds of one group (2 negotiated, 8 guessed); a
    smaller group 3 times then another (the old guess misses twice, the new one holds once);
    one key made ready by a worker (twice: the second time beside another store's pending
    request); the group twice (armed again); then only rank 0 pushes 3 more while the others
    joined."""
    _, results = two if workers == 2 else four
    rounds = ([([0, 1, 2, 3], r) for r in range(10)]
              + [([0, 1], r) for r in range(3)] + [([2, 3], 3), ([0, 1], 4)]
              + [([0, 1, 2, 3], r) for r in range(2)])
    for rank, result in enumerate(results):
        got = result["speculate"]
        mine = rounds + ([([0, 1, 2, 3], 100 + r) for r in range(3)] if rank == 0 else [])
        assert len(got["sums"]) == len(mine)
        for (keys, round_), sums in zip(mine, got["sums"]):
            senders = range(workers) if round_ < 100 else [0]
            for k in keys:  # rank r sent (r + 1) * (k + 1) + round_ everywhere
                assert sums[str(k)] == [sum((r + 1) * (k + 1) + round_ for r in senders)], \
                    (rank, round_, k)
        expected = [{"speculated": 8, "missed": 0}, {"speculated": 1, "missed": 2},
                    {"speculated": 0, "missed": 0}]
        if rank == 0:
            expected.append({"speculated": 3, "missed": 0})
        assert got["stats"] == expected
        assert got["root"] == 0
        # a slow producer on the engine's worker: that worker reduced its output itself
        assert got["late"] == [workers * (workers + 1) / 2]
        assert got["worker_rounds"] >= 1
        # the same, while another store's request waits: the store's own thread reduces it
        assert got["late_beside_pending"] == got["held"] == [workers * (workers + 1) / 2]
        assert got["worker_rounds_beside_pending"] == 0

def test_optimizer_on_the_store_with_states_saved_and_loaded(two):
    expected = linear_reference(2, [4, 4])
    for result in two[1]:
        assert result["store_update"]["file"]
        np.testing.assert_allclose(result["store_update"]["w"], expected, rtol=1e-4,
                                   atol=1e-5)


def test_hierarchical_store_on_one_shared_memory_node(two):
    _check_api(two[1], "hier_api", 2)


def test_hierarchical_store_gives_the_flat_results(four):
    _, results = four
    _check_api(results, "hier_api", 4)
    for result in results:
        np.testing.assert_allclose(result["hier_linear"]["w"], result["linear"]["w"],
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("workers", [2, 4])
def test_uneven_batches_join_and_replicas_agree(two, four, workers):
    _, results = two if workers == 2 else four
    steps = [5 if r % 2 == 0 else 3 for r in range(workers)]
    expected = linear_reference(workers, steps)
    for result in results:
        assert result["uneven"]["root"] == 0
        np.testing.assert_allclose(result["uneven"]["w"], expected, rtol=1e-4, atol=1e-5)


def _two_bit_reference(workers: int, threshold: float = 0.5) -> list[np.ndarray]:
    residuals = [np.zeros(1000, np.float32) for _ in range(workers)]
    sums = []
    for round_ in range(3):
        total = np.zeros(1000, np.float32)
        for r in range(workers):
            acc = residuals[r] + common.compression_data(r, round_)
            sent = threshold * ((acc >= threshold).astype(np.float32) - (acc <= -threshold))
            residuals[r] = acc - sent
            total += sent
        sums.append(total)
    return sums


def test_two_bit_compression_with_error_feedback_matches_numpy(two):
    expected = _two_bit_reference(2)
    for result in two[1]:
        for got, want in zip(result["2bit"]["sums"], expected):
            np.testing.assert_array_equal(np.asarray(got, np.float32), want)


def test_fp16_compression_sums_the_rounded_values(two):
    for result in two[1]:
        for round_, got in enumerate(result["fp16"]["sums"]):
            want = np.zeros(1000, np.float32)
            for r in range(2):
                want += common.compression_data(r, round_).astype(np.float16)
            np.testing.assert_array_equal(np.asarray(got, np.float32), want)


def test_checkpoint_written_by_rank_0_and_resumed_by_every_rank(two, tmp_path):
    out, results = two
    written = [r["checkpoint"]["written"] for r in results]
    assert written[0] is not None and written[1:] == [None]
    assert any(f.endswith(".json") for f in results[1]["checkpoint"]["files"])
    shutil.copytree(out / "ckpt", tmp_path / "ckpt")
    check(run_ranks(2, [SUITE, str(tmp_path), "resume"], timeout=120))
    expected = linear_reference(2, [6, 6])  # 3 steps, checkpoint, 3 more = 6 steps
    for result in common.read_results(str(tmp_path), 2):
        assert result["resume"]["step"] == 3
        np.testing.assert_allclose(result["resume"]["w"], expected, rtol=1e-4, atol=1e-5)


def test_a_single_process_dist_store_is_a_one_worker_world(tmp_path):
    script = ("import portable as pt, numpy as np\n"
              "kv = pt.kv.create('dist_sync')\n"
              "kv.init(0, pt.nd.ones((3,))); g = pt.nd.array(np.arange(3, dtype='float32'))\n"
              "kv.pushpull(0, g); kv.barrier()\n"
              "print(kv.rank, kv.num_workers, g.asnumpy().tolist())\n")
    job = check(run_python(["-c", script]))
    assert job.stdout.split("\n")[0] == "0 1 [0.0, 1.0, 2.0]"


def test_importing_the_stores_loads_no_mpi():
    job = check(run_python(["-c", "import sys, portable as pt; pt.kv.kvstores['dist_sync'];"
                            "import portable.kvstore.dist_sync, portable.kvstore.dist_async,"
                            " portable.kvstore.hierarchical, portable.distributed;"
                            "print('mpi4py' in sys.modules)"]))
    assert job.stdout.strip() == "False"
