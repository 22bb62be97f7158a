"""``fit`` checkpoints of runs that train one replica per worker group (EASGD, local SGD):
resuming them ends where a run that was never interrupted ends, bit for bit (every group's
replica, the centre, the step counters); the checkpoint's parameters are the centre, the model
that is exported; a damaged states file is refused on every rank alike and the run falls back
to the previous checkpoint; ``portable train --resume`` does the same end to end.

The MPI jobs run 4 workers in 2 allreduce groups of 2 (plus 1 parameter server for EASGD) with
one collective per tensor (``PORTABLE_KV_BUCKET_MB=0``: buckets that depend on timing could sum
in another order from run to run). EASGD runs in synchronous rounds (between asynchronous groups
the centre depends on the order in which exchanges arrive), except with a single group, where
an asynchronous answer is pending when each checkpoint is taken (22 steps per epoch, tau 2).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from portable import optim
from portable.errors import SerializationError
from portable.gluon import Parameter
from portable.gluon.parameter_dict import load_parameter_file
from portable.gluon.trainer_states import check_replica_states
from portable.io.tensors import load_tensors, tensors_from_bytes, tensors_to_bytes
from tests.kvstore.mpi import SCRIPTS, check, needs_mpi, run_ranks
from tests.kvstore.mpi_scripts import common

FIT = str(SCRIPTS / "replica_fit.py")
EPOCHS, INTERRUPTED_AFTER = 3, 2
ENV = {"PORTABLE_KV_BUCKET_MB": "0"}
STEPS_PER_EPOCH = {4: 11, 2: 22}  # batches of 32 of each worker's share of 1437 samples


def _fit_job(out: Path, workers: int, servers: int, group_size: int, args: list, epochs: int,
             resume: bool = False) -> list[dict]:
    check(run_ranks(workers, [FIT, str(out), *args, str(epochs), *(["resume"] if resume else [])],
                    servers=servers, env={**ENV, "PORTABLE_KV_GROUP_SIZE": str(group_size)},
                    timeout=200))
    return common.read_results(str(out), workers)


def _newest(folder: Path) -> Path:
    return sorted(folder.glob("ckpt-*.json"))[-1]


def _damage_group(manifest: Path, group: int) -> None:
    """Give ``group``'s part of the newest checkpoint's states step counters that are not
    counts, keeping the manifest's size and digest right (only the content check sees it)."""
    doc = json.loads(manifest.read_text())
    path = manifest.parent / doc["files"]["states"]["path"]
    tensors, meta = tensors_from_bytes(path.read_bytes())
    part, part_meta = tensors_from_bytes(tensors[f"group{group}"].tobytes())
    part_meta["steps"] = ["many"] * len(part_meta["steps"])
    tensors[f"group{group}"] = np.frombuffer(tensors_to_bytes(part, part_meta), np.uint8)
    data = tensors_to_bytes(tensors, meta)
    path.write_bytes(data)
    doc["files"]["states"].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    manifest.write_text(json.dumps(doc))


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(np.array(a[name]), np.array(b[name]), err_msg=name)


# -- fit resumes exactly ----------------------------------------------------------------------
@needs_mpi
@pytest.mark.parametrize("workers, servers, group_size, args", [
    (4, 1, 2, ["easgd", "sync"]),     # 2 groups of 2 + 1 server: MPI Elastic SGD
    (2, 1, 2, ["easgd", "async"]),    # 1 group: an answer is pending at every checkpoint
    (4, 0, 2, ["local_sgd", "-"]),    # 2 groups of 2, averaged every 2 steps
], ids=["easgd-sync-2-groups", "easgd-async-pending", "local_sgd-2-groups"])
def test_fit_resumes_replicas_centre_and_steps_exactly(tmp_path, workers, servers, group_size,
                                                        args):
    job = (workers, servers, group_size, args)
    full = _fit_job(tmp_path / "full", *job, EPOCHS)
    _fit_job(tmp_path / "resumed", *job, INTERRUPTED_AFTER)
    newest = _newest(tmp_path / "resumed" / "checkpoints")
    damaged = args == ["easgd", "sync"]
    if damaged:  # refused on every rank, not only group 1's: all fall back together
        _damage_group(newest, group=1)
    resumed = _fit_job(tmp_path / "resumed", *job, EPOCHS, resume=True)

    done = INTERRUPTED_AFTER - 1 if damaged else INTERRUPTED_AFTER  # epochs restored
    assert full[0]["history"] == resumed[0]["history"]  # (the checkpoints hold rank 0's)
    for a, b in zip(full, resumed):
        assert a["steps"] == b["steps"] == STEPS_PER_EPOCH[workers] * EPOCHS
        assert a["history"][done:] == b["history"][done:]  # each rank's own losses
        _assert_same(a["replica"], b["replica"])
        _assert_same(a["centre"], b["centre"])
    assert [r["group"] for r in full] == [rank // group_size for rank in range(workers)]
    if damaged:  # fell back one checkpoint: still exact
        assert all(r["resumed_from"].endswith("ckpt-e0001-s00000011.json") for r in resumed)
        assert all(len(r["refused"]) == 1 and "(group 1)" in r["refused"][0]
                   and "key 'steps'" in r["refused"][0] for r in resumed)
    else:
        assert all(r["resumed_from"] == str(newest) and not r["refused"] for r in resumed)
    # the newest checkpoint holds the centre (what is exported), not rank 0's replica
    for result, run in ((full[0], "full"), (resumed[0], "resumed")):
        manifest = _newest(tmp_path / run / "checkpoints")
        saved, _ = load_tensors(str(manifest).replace(".json", ".params.safetensors"))
        _assert_same(saved, result["centre"])
    if workers > group_size:  # two groups: their replicas, and the centre, differ
        assert full[0]["replica"] != full[-1]["replica"]
        assert full[0]["replica"] != full[0]["centre"]


# -- portable train --resume ------------------------------------------------------------------
def _train(out: Path, epochs: int, resume: bool = False) -> dict:
    job = check(run_ranks(4, ["-m", "portable.cli.main", "train", "--model", "mlp",
                              "--epochs", str(epochs), "--kvstore", "dist_async",
                              "--algorithm", "easgd", "--tau", "2", "--easgd-sync",
                              "--lr-schedule", "constant", "--no-progress", "--json",
                              "--out", str(out), *(["--resume"] if resume else [])],
                          servers=1, env={**ENV, "PORTABLE_KV_GROUP_SIZE": "2"}, timeout=240))
    return json.loads([line for line in job.stdout.splitlines() if line.startswith("{")][-1])


@needs_mpi
def test_portable_train_resumes_easgd_exactly_and_checkpoints_the_centre(tmp_path):
    # (a constant learning rate: a cosine schedule depends on --epochs, which differ here)
    full = _train(tmp_path / "full", EPOCHS)
    _train(tmp_path / "resumed", 1)
    resumed = _train(tmp_path / "resumed", EPOCHS, resume=True)
    assert resumed["resumed_from"].endswith("ckpt-e0001-s00000011.json")
    assert resumed["test_accuracy"] == full["test_accuracy"]
    exported = {}
    for name in ("full", "resumed"):
        exported[name] = load_parameter_file(str(tmp_path / name / "model.params.safetensors"))
        checkpoint, _ = load_tensors(full["paths"]["checkpoint"].replace(
            str(tmp_path / "full"), str(tmp_path / name)).replace(".json", ".params.safetensors"))
        _assert_same(checkpoint, exported[name])  # the newest checkpoint holds the centre
    _assert_same(exported["full"], exported["resumed"])


# -- the check of a replica checkpoint, without MPI -------------------------------------------
def _replica_checkpoint(params, groups=2, **changes):
    """Bytes in the layout of ``ReplicaKVStore.checkpoint_bytes`` for ``params``."""
    updater = optim.get_updater(optim.create("adam"))
    for index, param in enumerate(params):
        updater(index, param.data() * 0 + 1, param.data().copy())
    states = np.frombuffer(updater.get_states(True), np.uint8)
    tensors = {}
    for group in range(groups):
        part = {f"weight/{i}": p.data().asnumpy() for i, p in enumerate(params)}
        part["states"] = states
        part.update(changes.get("part", {}))
        meta = {"steps": changes.get("steps", [3] * len(params))}
        tensors[f"group{group}"] = np.frombuffer(tensors_to_bytes(part, meta), np.uint8)
    meta = {"format": changes.get("format", "portable.replica-checkpoint"),
            "algorithm": "easgd", "groups": groups,
            "keys": changes.get("keys", [[i, list(p.shape), "float32"]
                                         for i, p in enumerate(params)])}
    tensors.update(changes.get("tensors", {}))
    return tensors_to_bytes(tensors, meta)


@pytest.fixture()
def params():
    made = [Parameter("w", shape=(3, 2)), Parameter("b", shape=(3,))]
    for param in made:
        param.initialize()
    return made


def test_a_replica_checkpoint_that_fits_passes(params):
    check_replica_states(_replica_checkpoint(params), "ok", params, optim.create("adam"))


@pytest.mark.parametrize("changes, message", [
    ({"format": "portable.optimizer-states"}, "not a replica checkpoint"),
    ({"keys": [[0, [3, 2], "float32"]]}, "key 'keys' is not a list of this trainer's 2"),
    ({"keys": [[1, [3, 2], "float32"], [0, [3], "float32"]]}, "key 'keys', item 0"),
    ({"steps": [3, -1]}, "(group 0): key 'steps', parameter 'b'"),
    ({"steps": [3]}, "key 'steps' is not one count per parameter"),
    ({"part": {"weight/1": np.zeros(4, np.float32)}}, "the replica of parameter 'b' (index 1) "
                                                      "has shape [4]"),
    ({"part": {"states": np.zeros(3, np.uint8)}}, "(group 0)"),
    ({"tensors": {"group1": np.zeros(2, np.float32)}}, "group 1 is missing"),
], ids=["format", "keys-count", "keys-order", "steps-negative", "steps-count", "weight-shape",
        "states-damaged", "group-missing"])
def test_a_damaged_replica_checkpoint_is_refused_by_name(params, changes, message):
    data = _replica_checkpoint(params, **changes)
    with pytest.raises(SerializationError) as error:
        check_replica_states(data, "ckpt.states", params, optim.create("adam"))
    assert message in str(error.value) and "ckpt.states" in str(error.value)


def test_replica_states_of_another_optimizer_fit_only_when_it_is_restored(params):
    data = _replica_checkpoint(params)  # adam's: two state arrays per parameter
    sgd = optim.create("sgd", momentum=0.9)  # one
    check_replica_states(data, "ckpt.states", params, sgd, restore_optimizer=True)
    with pytest.raises(SerializationError, match=r"ckpt.states \(group 0\): parameter 'w' "
                                                 r"\(index 0\): the file keeps 2 state array"):
        check_replica_states(data, "ckpt.states", params, sgd, restore_optimizer=False)
