"""MPI Elastic SGD inside the parameter server (``dist_async`` with ``algorithm="easgd"``) and the
local SGD baseline: closed forms on a quadratic, convergence on digits, a dying server, exact
checkpoints, byte counters, the factory's and the CLI's checks.

The closed forms are written out by hand below (``easgd_sync`` ...), step by step, in NumPy;
the MPI jobs push hand-made gradients of ``0.5 * ||x - m_r||^2`` (worker r's quadratic) with
plain SGD in float64 (``mpi_scripts/replica_quadratic.py``).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from portable.errors import PortableError
from portable.kvstore.async_algorithms import create_dist_async
from portable.kvstore.elastic import ElasticRounds
from tests.kvstore.mpi import SCRIPTS, check, needs_mpi, run_ranks
from tests.kvstore.mpi_scripts import common

QUADRATIC = str(SCRIPTS / "replica_quadratic.py")
CHECKPOINT = str(SCRIPTS / "replica_checkpoint.py")
TOLERANCE = 1e-6


def _between(low, value, high):
    """Collectives count what they hand to MPI: a guessed round adds two verdict numbers, and
    a wrong guess sends its data once more; so the counts lie in [exact, about twice that]."""
    return low <= value <= high


# -- closed forms ----------------------------------------------------------------------------
def _gradient_step(x, members, key):
    """One SGD step of a group's replica: the gradient is summed over the group's members."""
    grad = sum(x - common.quadratic_target(j)[key] for j in members)
    return x - common.QUADRATIC_LR * grad


def _groups(workers, group_size):
    return [list(range(g, min(g + group_size, workers))) for g in range(0, workers, group_size)]


def easgd_sync(key, workers, group_size, tau, alpha, steps):
    """Synchronous EASGD: every tau steps, with one centre c for all groups,
    d_g = alpha (x_g - c); x_g -= d_g; c += sum_g d_g. Returns (replicas by group, c)."""
    groups = _groups(workers, group_size)
    x = [common.quadratic_start()[key].copy() for _ in groups]
    c = common.quadratic_start()[key].copy()
    for t in range(1, steps + 1):
        x = [_gradient_step(x[g], members, key) for g, members in enumerate(groups)]
        if t % tau == 0:
            d = [alpha * (x_g - c) for x_g in x]
            x = [x_g - d_g for x_g, d_g in zip(x, d)]
            c = c + sum(d)
    return x, c


def easgd_async_one_group(key, workers, tau, alpha, steps):
    """Asynchronous EASGD with one group: at exchange r the answer of exchange r-1 is applied,
    then d = alpha (x - c) is computed from the replica sent, c += d, and d stays pending."""
    members = list(range(workers))
    x = common.quadratic_start()[key].copy()
    c = x.copy()
    pending = None
    for t in range(1, steps + 1):
        x = _gradient_step(x, members, key)
        if t % tau == 0:
            if pending is not None:
                x = x - pending
            pending = alpha * (x - c)
            c = c + pending
    return x, c


def local_sgd(key, workers, tau, steps):
    """Local SGD: each worker steps on its own quadratic; every tau steps all take the mean.
    Returns (replicas by worker, their mean)."""
    x = [common.quadratic_start()[key].copy() for _ in range(workers)]
    for t in range(1, steps + 1):
        x = [_gradient_step(x[j], [j], key) for j in range(workers)]
        if t % tau == 0:
            mean = sum(x) / workers
            x = [mean.copy() for _ in range(workers)]
    return x, sum(x) / workers


def _quadratic_job(tmp_path, workers, servers, args, env=None):
    check(run_ranks(workers, [QUADRATIC, str(tmp_path), *map(str, args)], servers=servers,
                    env=env, timeout=150))
    return common.read_results(str(tmp_path), workers)


# -- EASGD and local SGD against the closed forms --------------------------------------------
@needs_mpi
def test_easgd_tau_1_synchronous_equals_the_closed_form(tmp_path):
    # 3 workers in groups of 2 (the last group holds one), 2 servers, "w" cut between them
    workers, group_size, alpha, steps = 3, 2, 0.3, 6
    results = _quadratic_job(tmp_path, workers, 2,
                             ["easgd", 1, group_size, steps, alpha, "sync"],
                             env={"PORTABLE_KV_BIGARRAY": "8"})
    for key in common.QUADRATIC_SHAPES:
        replicas, centre = easgd_sync(key, workers, group_size, 1, alpha, steps)
        for rank, result in enumerate(results):
            assert result["group"] == rank // group_size and result["steps"] == steps
            np.testing.assert_allclose(result["replica"][key], replicas[rank // group_size],
                                       rtol=0, atol=TOLERANCE)
            np.testing.assert_allclose(result["centre"][key], centre, rtol=0, atol=TOLERANCE)
    # the replicas did move away from the start and toward each other through the centre
    assert not np.allclose(results[0]["replica"]["w"], results[2]["replica"]["w"])


@needs_mpi
def test_easgd_asynchronous_applies_each_answer_at_the_next_exchange(tmp_path):
    workers, tau, alpha, steps = 2, 2, 0.4, 7
    results = _quadratic_job(tmp_path, workers, 1, ["easgd", tau, workers, steps, alpha, "async"])
    for key in common.QUADRATIC_SHAPES:
        replica, centre = easgd_async_one_group(key, workers, tau, alpha, steps)
        for result in results:
            np.testing.assert_allclose(result["replica"][key], replica, rtol=0, atol=TOLERANCE)
            np.testing.assert_allclose(result["centre"][key], centre, rtol=0, atol=TOLERANCE)


@needs_mpi
def test_local_sgd_equals_the_average_of_independently_trained_workers(tmp_path):
    workers, tau, steps = 3, 3, 7  # two averages, then one step apart again
    results = _quadratic_job(tmp_path, workers, 0, ["local_sgd", tau, 1, steps])
    nbytes = sum(8 * int(np.prod(shape)) for shape in common.QUADRATIC_SHAPES.values())
    for key in common.QUADRATIC_SHAPES:
        replicas, mean = local_sgd(key, workers, tau, steps)
        for rank, result in enumerate(results):
            np.testing.assert_allclose(result["replica"][key], replicas[rank], rtol=0,
                                       atol=TOLERANCE)
            np.testing.assert_allclose(result["centre"][key], mean, rtol=0, atol=TOLERANCE)
    exact = (steps // tau + 1) * nbytes  # one allreduce of every key per average + pull_center
    for result in results:
        sent, received = (result["traffic"][k] - result["after_init"][k]
                          for k in ("sent", "received"))
        assert sent == received and _between(exact, sent, 2 * exact)


# -- convergence, failures, checkpoints -------------------------------------------------------
@needs_mpi
def test_easgd_centre_converges_on_digits(tmp_path):
    # 4 workers in 2 allreduce groups of 2 + 1 server: the MPI Elastic SGD configuration
    check(run_ranks(4, [str(SCRIPTS / "easgd_digits.py"), str(tmp_path), "5", "4", "2"],
                    servers=1, timeout=200))
    results = common.read_results(str(tmp_path), 4)
    assert [r["group"] for r in results] == [0, 0, 1, 1]
    assert results[0]["alpha"] == pytest.approx(0.45)  # 0.9 / groups
    assert results[0]["centre_accuracy"] >= 0.9  # chance is 0.1; it reaches ~0.97
    assert len({r["centre_accuracy"] for r in results}) == 1  # one centre, pulled by all
    for result in results:
        assert result["traffic"]["sent"] > 0 and result["traffic"]["received"] > 0


def _flavor() -> str:
    from portable.distributed.launch import find_mpiexec, mpi_flavor

    return mpi_flavor(find_mpiexec())


@needs_mpi
def test_a_dead_server_ends_the_job_naming_its_rank():
    job = run_ranks(3, [str(SCRIPTS / "easgd_failure.py")],
                    env={"PORTABLE_KV_SERVERS": "1", "PORTABLE_KV_TIMEOUT": "60"}, timeout=90)
    assert job.returncode != 0
    assert job.seconds < 40  # not the 60 s kvstore timeout: the MPI runtime ends the job
    assert "rank 2" in job.stderr


@needs_mpi
def test_a_dead_server_is_reported_by_the_watchdog_within_the_timeout():
    if _flavor() != "openmpi":
        pytest.skip("--enable-recovery (keep the job alive after a death) is an Open MPI option")
    timeout = 4
    job = run_ranks(3, [str(SCRIPTS / "easgd_failure.py")],
                    env={"PORTABLE_KV_SERVERS": "1", "PORTABLE_KV_TIMEOUT": str(timeout)},
                    timeout=90, mpi_args=("--enable-recovery",))
    assert job.seconds < timeout + 40
    assert "timed out after" in job.stderr
    assert "elastic answer from server rank(s) 2 for key 'w'" in job.stderr
    assert "rank 2: did not answer (dead" in job.stderr


def _checkpoint_runs(tmp_path, workers, servers, args, env=None):
    for phase in ("full", "resume"):
        check(run_ranks(workers, [CHECKPOINT, str(tmp_path), phase, *map(str, args)],
                        servers=servers, env=env, timeout=150))
    return (common.read_results(str(tmp_path / "full"), workers),
            common.read_results(str(tmp_path / "resume"), workers))


@needs_mpi
@pytest.mark.parametrize("workers, servers, args", [
    # synchronous rounds, 2 groups of 2, saved between two exchanges (step 3, tau 2)
    (4, 1, ["easgd", 2, 2, "sync", 8, 3]),
    # asynchronous, one group: an answer is pending when the checkpoint is taken
    (2, 1, ["easgd", 2, 2, "async", 9, 5]),
    (3, 0, ["local_sgd", 2, 1, "-", 9, 5]),
], ids=["easgd-sync", "easgd-async-pending", "local_sgd"])
def test_a_checkpoint_resumes_centre_and_replicas_exactly(tmp_path, workers, servers, args):
    # One collective per tensor (no fusion): with 3 ranks, buckets that depend on timing would
    # sum in another order from run to run, and the runs could differ in the last bit.
    full, resumed = _checkpoint_runs(tmp_path, workers, servers, args,
                                     env={"PORTABLE_KV_BUCKET_MB": "0"})
    for a, b in zip(full, resumed):
        assert a["steps"] == b["steps"] == args[4]
        for what in ("at_checkpoint", "replica", "centre"):
            for x, y in zip(a[what], b[what]):
                np.testing.assert_array_equal(np.array(x), np.array(y))
    if args[0] == "easgd" and args[2] < workers:  # each group's own replica was kept
        assert full[0]["replica"] != full[-1]["replica"]


@needs_mpi
def test_a_checkpoint_of_other_groups_is_refused_by_name(tmp_path):
    check(run_ranks(2, [CHECKPOINT, str(tmp_path), "full", "easgd", "2", "1", "sync", "4",
                        "2"], servers=1, timeout=150))
    job = run_ranks(2, [CHECKPOINT, str(tmp_path), "resume", "easgd", "2", "2", "sync", "4",
                        "2"], servers=1, timeout=150)
    assert job.returncode != 0
    assert "replicas.safetensors: saved with group_size 1 (this store: 2)" in job.stderr
    assert "groups 2 (this store: 1)" in job.stderr


@needs_mpi
def test_easgd_needs_a_server_rank():
    job = run_ranks(2, ["-c", "import portable as pt; pt.kv.create('dist_async', "
                        "algorithm='easgd')"], timeout=60)
    assert job.returncode != 0
    assert "there are none (PORTABLE_KV_SERVERS=0)" in job.stderr and "--servers" in job.stderr


@needs_mpi
def test_portable_train_with_easgd_exports_the_centre(tmp_path):
    job = check(run_ranks(2, ["-m", "portable.cli.main", "train", "--model", "mlp",
                              "--epochs", "4", "--kvstore", "dist_async", "--algorithm", "easgd",
                              "--tau", "2", "--easgd-alpha", "0.4", "--no-progress", "--json",
                              "--out", str(tmp_path)], servers=1, timeout=240))
    lines = [line for line in job.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, job.stdout  # only rank 0 reports
    summary = json.loads(lines[0])
    assert summary["test_accuracy"] >= 0.85  # chance 0.1; ~0.94
    # the saved parameters are the centre: they reproduce the reported accuracy
    import portable as pt
    from portable.data.vision import load_arrays
    from portable.models.zoo import get_model

    split = load_arrays("digits")
    net = get_model("mlp")
    net.load_parameters(str(tmp_path / "model.params.safetensors"))
    scores = net(pt.nd.array(split.x_test)).asnumpy()
    assert np.mean(scores.argmax(1) == split.y_test) == pytest.approx(summary["test_accuracy"])


# -- without MPI: the servers' rules, the factory, the command line ---------------------------
def test_asynchronous_answers_move_the_centre_by_what_they_hand_out():
    rounds = ElasticRounds(alpha=0.25, groups=2, sync=False)
    centre = np.zeros(3)
    for source, x in ((5, np.full(3, 4.0)), (6, np.full(3, -8.0))):
        new, replies = rounds.offer(source, "k", 1, source - 5, x, lambda: centre)
        ((dest, d),) = replies
        assert dest == source
        np.testing.assert_allclose(d, 0.25 * (x - centre))
        np.testing.assert_allclose(new, centre + d)  # elastic symmetry
        centre = new
    np.testing.assert_allclose(centre, [1.0 - 0.25 * 9.0] * 3)


def test_synchronous_rounds_answer_from_one_centre_in_each_senders_order():
    rounds = ElasticRounds(alpha=0.5, groups=2, sync=True)
    centres = {"a": np.zeros(2), "b": np.ones(2)}
    # group 0 (rank 10) sends b then a; group 1 (rank 11) sends a then b
    assert rounds.offer(10, "b", 1, 0, np.full(2, 3.0), lambda: centres["b"]) == (None, [])
    assert rounds.offer(11, "a", 1, 1, np.full(2, 2.0), lambda: centres["a"]) == (None, [])
    assert [r[:3] for r in rounds.waiting()] == [("b", 1, [0]), ("a", 1, [1])]
    new_a, replies = rounds.offer(10, "a", 1, 0, np.full(2, 4.0), lambda: centres["a"])
    np.testing.assert_allclose(new_a, 0.5 * 4.0 + 0.5 * 2.0)  # c + alpha * sum (x_g - c)
    # rank 10 is owed b's answer first: a's waits; rank 11's answer for a goes now
    assert [(dest, d.tolist()) for dest, d in replies] == [(11, [1.0, 1.0])]
    new_b, replies = rounds.offer(11, "b", 1, 1, np.full(2, 5.0), lambda: centres["b"])
    np.testing.assert_allclose(new_b, 1.0 + 0.5 * 2.0 + 0.5 * 4.0)
    assert [(dest, d.tolist()) for dest, d in replies] == [
        (10, [1.0, 1.0]), (10, [2.0, 2.0]), (11, [2.0, 2.0])]
    with pytest.raises(PortableError, match="group 0 sent round 2 of key/part a twice"):
        rounds.offer(10, "a", 2, 0, np.zeros(2), lambda: centres["a"])
        rounds.offer(12, "a", 2, 0, np.zeros(2), lambda: centres["a"])


class _World:
    """What a server sends, recorded (the server's side of MPI, without MPI)."""

    def __init__(self) -> None:
        self.sent: list = []

    def Send(self, data, dest, tag):  # noqa: N802 (mpi4py's name)
        self.sent.append((dest, tag, np.array(data)))


class _Comm:
    rank = 2

    def __init__(self) -> None:
        self.world = _World()


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_members_pull_of_the_centre_waits_for_its_leaders_exchanges(sync):
    """Only a group's leader exchanges with the servers, so another member's pull of the
    centre can reach a server before the leader's exchange does (seen under load: the centre
    one exchange behind). The pull names the group's exchanges so far; the server answers it
    once the centre holds them (in sync mode, once the round is complete)."""
    from portable.kvstore.comm import TAG_PS_REPLY
    from portable.kvstore.ps import Server

    comm = _Comm()
    server = Server(comm)
    server._handle(0, {"op": "elastic_config", "alpha": 0.5, "groups": 2, "sync": sync}, None)
    server._handle(0, {"op": "init", "key": "w", "part": 0, "dtype": "float64", "size": 2},
                   np.zeros(2).view(np.uint8))
    replies = lambda dest: [d for to, tag, d in comm.world.sent  # noqa: E731
                            if to == dest and tag == TAG_PS_REPLY]
    server._handle(1, {"op": "pull", "key": "w", "part": 0, "after": [0, 1]}, None)
    server._handle(3, {"op": "pull", "key": "w", "part": 0}, None)  # (no need: at once)
    assert replies(1) == [] and replies(3)[0].tolist() == [0.0, 0.0]
    exchange = {"op": "elastic", "key": "w", "part": 0, "round": 1}
    server._handle(0, {**exchange, "group": 0}, np.array([2.0, 4.0]).view(np.uint8))
    if sync:  # (the round waits for group 1: so does the pull)
        assert replies(1) == []
        server._handle(4, {**exchange, "group": 1}, np.array([-2.0, 0.0]).view(np.uint8))
        want = [0.5 * 2.0 + 0.5 * -2.0, 0.5 * 4.0]
    else:
        want = [1.0, 2.0]
    (got,) = replies(1)
    assert got.view(np.float64).tolist() == want


@pytest.mark.parametrize("alpha, groups, match", [
    (0.0, 1, r"alpha must be in \(0, 1\]"), (1.5, 1, r"alpha must be in \(0, 1\]"),
    (0.5, 0, "number of groups must be positive")])
def test_elastic_rules_refuse_bad_settings(alpha, groups, match):
    with pytest.raises(PortableError, match=match):
        ElasticRounds(alpha, groups, sync=False)


@pytest.mark.parametrize("kwargs, match", [
    ({"algorithm": "adam"}, "unknown algorithm 'adam'; available: sgd, easgd, local_sgd"),
    ({"alpha": 0.5}, r"\(algorithm 'sgd'\) takes no alpha .* algorithm 'easgd' takes them"),
    ({"algorithm": "local_sgd", "sync": True}, r"takes no sync .* algorithm 'easgd'"),
])
def test_the_factory_refuses_settings_by_name(kwargs, match):
    with pytest.raises(PortableError, match=match):
        create_dist_async("dist_async", **kwargs)


@pytest.mark.parametrize("args, message", [
    (["--algorithm", "easgd"], "--algorithm easgd runs on --kvstore dist_async"),
    (["--kvstore", "dist_async", "--tau", "3"],
     "--tau does not apply to --algorithm sgd; use --algorithm easgd or local_sgd"),
    (["--kvstore", "dist_async", "--algorithm", "local_sgd", "--easgd-alpha", "0.5"],
     "--easgd-alpha does not apply to --algorithm local_sgd; use --algorithm easgd"),
    (["--easgd-alpha", "1.5"], "argument --easgd-alpha: must be at most 1, got '1.5'"),
    (["--easgd-alpha", "0"], "argument --easgd-alpha: must be a positive number"),
    (["--tau", "0"], "argument --tau: must be a positive integer, got '0'"),
])
def test_train_refuses_algorithm_flags_that_do_not_fit(tmp_path, capsys, args, message):
    from portable.cli.main import main

    try:
        code = main(["train", "--model", "mlp", "--epochs", "1", "--no-progress",
                     "--out", str(tmp_path), *args])
    except SystemExit as exc:  # argparse's own checks
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "checkpoints").exists()  # refused before any work


# -- bytes moved: what a benchmark compares the stores by -------------------------------------
@needs_mpi
def test_stores_count_the_bytes_they_move(tmp_path):
    steps, tau, workers = 8, 4, 2
    moved = {}
    for store in ("dist_sync", "sgd", "local_sgd", "easgd"):
        out = tmp_path / store
        out.mkdir()
        servers = 0 if store in ("dist_sync", "local_sgd") else 1
        check(run_ranks(workers, [str(SCRIPTS / "traffic.py"), str(out), store, str(steps),
                                  str(tau)], servers=servers, timeout=120))
        moved[store] = common.read_results(str(out), workers)
    n = moved["dist_sync"][0]["nbytes"]
    headers = 4096  # the JSON headers of the parameter-server messages, generously
    for rank in range(workers):
        sync, ps = moved["dist_sync"][rank], moved["sgd"][rank]
        local, elastic = moved["local_sgd"][rank], moved["easgd"][rank]
        # dist_sync: every step allreduces every gradient
        assert sync["sent"] == sync["received"] and _between(steps * n, sync["sent"],
                                                             2 * steps * n)
        # dist_async: every step pushes the gradients and pulls the weights (point to point:
        # exact, but for the headers)
        assert steps * n <= ps["sent"] <= steps * n + headers
        assert ps["received"] == steps * n
        # local SGD: one average of the weights every tau steps, nothing else
        assert local["sent"] == local["received"] and _between(steps // tau * n, local["sent"],
                                                               2 * steps // tau * n)
        # EASGD: one exchange every tau steps (the last answer may still be on its way)
        assert steps // tau * n <= elastic["sent"] <= steps // tau * n + headers
        assert (steps // tau - 1) * n <= elastic["received"] <= steps // tau * n
