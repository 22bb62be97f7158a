"""Rank script: the dist_sync checks of tests/kvstore/test_dist_sync.py, run on every rank.

Usage: sync_suite.py OUT_DIR CHECK[,CHECK...] [--local N]
  --local N: one process playing N workers' combined batch with the local store (reference).
Each rank writes OUT_DIR/rank<r>.json with one entry per check.
"""
from __future__ import annotations

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.repo_on_path()
import numpy as np  # noqa: E402

import portable as pt  # noqa: E402
from portable import distributed, gluon  # noqa: E402
from portable.engine import get_engine  # noqa: E402
from portable.errors import PortableError  # noqa: E402
from portable.gluon import Parameter, Trainer  # noqa: E402


def check_api(kv) -> dict:
    """init from rank 0, exact sums of fused/sliced keys, push/pull, broadcast_bytes."""
    r, n = kv.rank, kv.num_workers
    kv.init("a", pt.nd.array(np.full(3, r + 7, np.float32)))
    a = pt.nd.zeros((3,))
    kv.pull("a", out=a)
    sizes = {0: 5, 1: 1, "big": 300_000, 3: 40_000}
    keys = list(sizes)
    kv.init(keys, [pt.nd.zeros((sizes[k],)) for k in keys])
    values = [pt.nd.array(np.arange(sizes[k], dtype=np.float32) * (r + 1)) for k in keys]
    for _ in range(2):  # twice: the second round reuses the plan and buffers
        kv.pushpull(keys, values)
    # a group whose arrays are still being computed: it waits for every producer
    produced = [v * 1.0 for v in values]
    kv.pushpull(keys, produced)
    # arrays back to back in one buffer are reduced as one range (sliced in tiny buckets)
    packed = pt.nd.contiguous_zeros([(sizes[k],) for k in keys])
    for k, array_ in zip(keys, packed):
        array_[:] = pt.nd.array(np.arange(sizes[k], dtype=np.float32) * (r + 1))
    before = kv.stats["buckets"]
    kv.pushpull(keys, packed)
    packed_buckets = kv.stats["buckets"] - before
    kv.pushpull(keys, [v * 1.0 for v in packed])  # not back to back: one piece per key
    sums = {str(k): [float(v.asnumpy()[0]), float(v.asnumpy()[-1]),
                     float(v.asnumpy().astype(np.float64).sum())] for k, v in zip(keys, values)}
    single = []
    for i in range(20):  # per-key calls with priorities, as the Trainer makes them
        kv.init(f"s{i}", pt.nd.zeros((i + 1,)))
        single.append(pt.nd.array(np.full(i + 1, r + i, np.float32)))
    for i, value in enumerate(single):
        kv.pushpull(f"s{i}", value, priority=-i)
    pushed = pt.nd.array(np.full(5, r + 1, np.float32))
    kv.push(0, pushed)
    pulled = pt.nd.zeros((5,))
    kv.pull(0, out=pulled)
    out = pt.nd.zeros((1,))
    kv.pushpull(1, pt.nd.array(np.array([r], np.float32)), out=out)
    kv.barrier()
    data = kv.broadcast_bytes(b"from rank %d" % (n - 1) if r == n - 1 else None, root=n - 1)
    return {"a": a.asnumpy().tolist(),
            "sums": sums,
            "produced": [float(v.asnumpy()[-1]) for v in produced],
            "packed": [float(v.asnumpy()[-1]) for v in packed],
            "packed_buckets": packed_buckets,
            "separate_buckets": kv.stats["buckets"] - before - packed_buckets,
            "single": [s.asnumpy().tolist() for s in single],
            "pushed_unchanged": pushed.asnumpy().tolist(), "pulled": pulled.asnumpy().tolist(),
            "out": out.asnumpy().tolist(), "bytes": data.decode(), "rank": r, "workers": n,
            "stats": kv.stats}


def _linear_trainer(kvstore, w0):
    param = Parameter("w", shape=w0.shape)
    param.initialize(pt.init.Zero())
    param.set_data(w0)
    return param, Trainer([param], "sgd", dict(common.LINEAR), kvstore=kvstore)


def _linear_steps(param, trainer, x, t, rows, steps, global_batch):
    for _ in range(steps):
        xb, tb = pt.nd.array(x[rows]), pt.nd.array(t[rows])
        with pt.autograd.record():
            diff = pt.nd.dot(xb, param.data().T) - tb
            loss = (diff * diff).sum() * 0.5
        loss.backward()
        trainer.step(global_batch)


def check_linear(kvstore, rank, workers, steps=4) -> dict:
    """Least squares, SGD with momentum: compared with NumPy by the test."""
    w0, x, t = common.linear_problem(workers)
    param, trainer = _linear_trainer(kvstore, w0)
    rows = common.shard_rows(rank, workers, len(x)) if rank >= 0 else np.arange(len(x))
    _linear_steps(param, trainer, x, t, rows, steps, len(x))
    return {"w": param.data().asnumpy().tolist()}


def check_store_update(out_dir, rank, workers) -> dict:
    """The optimizer applied on the store (update_on_kvstore), its states saved by rank 0 and
    loaded back by every rank."""
    w0, x, t = common.linear_problem(workers)
    param = Parameter("w", shape=w0.shape)
    param.initialize(pt.init.Zero())
    param.set_data(w0)
    trainer = Trainer([param], "sgd", dict(common.LINEAR), kvstore="dist_sync",
                      update_on_kvstore=True)
    rows = common.shard_rows(rank, workers, len(x))
    _linear_steps(param, trainer, x, t, rows, 2, len(x))
    path = os.path.join(out_dir, "store_states.safetensors")
    trainer.kvstore.save_optimizer_states(path)
    trainer.kvstore.load_optimizer_states(path)
    _linear_steps(param, trainer, x, t, rows, 2, len(x))
    return {"w": param.data().asnumpy().tolist(), "file": os.path.exists(path)}


def check_uneven(kvstore, rank, workers) -> dict:
    """Rank r takes 5 steps if r is even, else 3; then join: every replica equals the one that
    took every step."""
    w0, x, t = common.linear_problem(workers)
    param, trainer = _linear_trainer(kvstore, w0)
    rows = common.shard_rows(rank, workers, len(x))
    _linear_steps(param, trainer, x, t, rows, 5 if rank % 2 == 0 else 3, len(x))
    root = distributed.join(trainer)
    return {"w": param.data().asnumpy().tolist(), "root": root}


def check_mlp(kvstore, rank, workers, steps=4, info: dict | None = None) -> dict:
    """A two-layer MLP with Adam, compared by the test with a one-process run. ``info`` gets
    the keys of each ``pushpull`` call of the Trainer's step."""
    pt.random.seed(3)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(6 * workers, 7)).astype(np.float32)
    y = rng.normal(size=(6 * workers, 3)).astype(np.float32)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(3))
    net.initialize(pt.init.Xavier())
    net(pt.nd.zeros((1, 7)))
    trainer = Trainer(net.collect_params(), "adam", {"learning_rate": 0.05}, kvstore=kvstore)
    loss_fn = gluon.loss.L2Loss()
    rows = common.shard_rows(rank, workers, len(x)) if rank >= 0 else np.arange(len(x))
    for _ in range(steps):
        with pt.autograd.record():
            loss = loss_fn(net(pt.nd.array(x[rows])), pt.nd.array(y[rows]))
        loss.backward()
        trainer.step(len(x))
    if info is not None:
        info["groups"] = trainer.gradient_groups()
        grads = [p.list_grad()[0]._data for p in net.collect_params().values()]  # key order
        ends = [(g.__array_interface__["data"][0], g.nbytes) for g in grads]
        info["back_to_back"] = all(a + n == b for (a, n), (b, _) in zip(ends, ends[1:]))
    return {name: p.data().asnumpy().tolist() for name, p in
            sorted(net.collect_params().items())}


def check_mixed(rank: int) -> dict:
    """30 seeded rounds of a random subset of 40 keys, pushed as a group, key by key, or key
    by key in reverse with random priorities, from arrays back to back in one buffer or
    separate: whatever is fused, joined or sliced, every sum must come out exact."""
    kv = pt.kv.create("dist_sync", bucket_size_mb=0.01)
    rng = np.random.default_rng(123)  # the same draws on every rank
    sizes = [int(s) for s in rng.integers(1, 3000, size=40)]
    keys = list(range(40))
    kv.init(keys, [pt.nd.zeros((s,)) for s in sizes])
    packed = pt.nd.contiguous_zeros([(s,) for s in sizes])
    separate = [pt.nd.zeros((s,)) for s in sizes]
    rounds = []
    for round_ in range(30):
        mode = int(rng.integers(0, 3))
        subset = sorted(rng.choice(40, size=int(rng.integers(1, 40)), replace=False).tolist())
        arrays = packed if rng.integers(0, 2) else separate
        for k in subset:
            arrays[k][:] = pt.nd.array(np.full(sizes[k], (rank + 1) * (k + 1) + round_,
                                               np.float32))
        if mode == 0:
            kv.pushpull(subset, [arrays[k] for k in subset])
        else:
            order = subset if mode == 1 else subset[::-1]
            for k in order:
                kv.pushpull(k, arrays[k], priority=-k if mode == 1 else int(rng.integers(-5, 5)))
        rounds.append({str(k): [float(x) for x in np.unique(arrays[k].asnumpy())]
                       for k in subset})
    return {"sizes": sizes, "rounds": rounds}


def check_declared(rank: int, store: str) -> dict:
    """Groups declared in advance travel as one request each (``Trainer`` declares its
    gradient groups so): 20 seeded rounds push every declared group, from arrays back to
    back in one buffer (a view of them travels) or separate (a packed copy, unpacked after),
    or an undeclared subset (key by key); every sum must come out exact. Then rank 1
    declares its group in another order: every rank gets the error."""
    kv = pt.kv.create(store, bucket_size_mb=0.01)
    rng = np.random.default_rng(7)  # the same draws on every rank
    sizes = [int(s) for s in rng.integers(1, 3000, size=24)]
    keys = list(range(24))
    kv.init(keys, [pt.nd.zeros((s,)) for s in sizes])
    cuts = sorted(rng.choice(np.arange(1, 24), size=7, replace=False).tolist())
    groups = [keys[a:b] for a, b in zip([0] + cuts, cuts + [24])]
    for group in groups:
        kv.declare_group(group)
    packed = pt.nd.contiguous_zeros([(s,) for s in sizes])
    separate = [pt.nd.zeros((s,)) for s in sizes]
    rounds = []
    for round_ in range(20):
        arrays = packed if rng.integers(0, 2) else separate
        declared = bool(rng.integers(0, 3))
        calls = groups if declared else [sorted(rng.choice(24, size=5, replace=False).tolist())]
        for call in calls:
            for k in call:
                arrays[k][:] = pt.nd.array(np.full(sizes[k], (rank + 1) * (k + 1) + round_,
                                                   np.float32))
            kv.pushpull(call, [arrays[k] for k in call], priority=-call[0])
        rounds.append({str(k): [float(x) for x in np.unique(arrays[k].asnumpy())]
                       for call in calls for k in call})
    pt.nd.waitall()
    requests = []  # per call: one per declared group, one per key otherwise
    for calls in (groups, [[3, 9, 17]]):
        before = kv.stats["requests"]
        for call in calls:
            kv.pushpull(call, [packed[k] for k in call])
        pt.nd.waitall()
        requests.append(kv.stats["requests"] - before)
    # a declared group's arrays are checked once, and again whenever another array comes:
    # one of the wrong size is refused before anything travels (on every rank alike)
    wrong = [packed[k] for k in groups[0]]
    wrong[-1] = pt.nd.zeros((sizes[groups[0][-1]] + 1,))
    try:
        kv.pushpull(groups[0], wrong)
        wrong_error = None
    except PortableError as exc:
        wrong_error = str(exc)
    kv.barrier()
    try:
        kv.declare_group([2, 1] if rank == 1 else [1, 2])
        error = None
    except PortableError as exc:
        error = str(exc)
    return {"rounds": rounds, "groups": groups, "error": error, "requests": requests,
            "wrong_error": wrong_error, "wrong_key": groups[0][-1],
            "wrong_size": sizes[groups[0][-1]]}


def check_speculate(rank: int, workers: int) -> dict:
    """Groups of keys pushed round after round: after two negotiated rounds the store guesses
    the set (one collective per round); a different set makes the guess miss; a rank that
    joined stands in with zeros for a guessed set. Every sum must be exact throughout."""
    kv = pt.kv.create("dist_sync")
    sizes = [3, 1000, 7, 500]
    kv.init(list(range(4)), [pt.nd.zeros((n,)) for n in sizes])
    pt.nd.waitall()  # (the init broadcasts agree apart from the first group)
    out: dict = {"sums": [], "stats": []}

    def push(keys: list[int], round_: int) -> None:
        arrays = [pt.nd.array(np.full(sizes[k], (rank + 1) * (k + 1) + round_, np.float32))
                  for k in keys]
        kv.pushpull(keys, arrays)
        out["sums"].append({str(k): np.unique(a.asnumpy()).tolist()
                            for k, a in zip(keys, arrays)})

    def phase(pushes: list[tuple[list[int], int]]) -> None:
        before = kv.stats
        for keys, round_ in pushes:
            push(keys, round_)
        pt.nd.waitall()
        after = kv.stats
        out["stats"].append({k: after[k] - before[k] for k in ("speculated", "missed")})

    phase([([0, 1, 2, 3], r) for r in range(10)])          # 2 negotiated, then 8 guessed
    phase([([0, 1], r) for r in range(3)] + [([2, 3], 3), ([0, 1], 4)])  # 1 held, 2 missed
    # data made ready by an engine worker with nothing else queued: it runs the round itself
    before = kv.stats["worker_rounds"]
    late = pt.nd.array(np.full(sizes[0], rank + 1, np.float32))
    get_engine().push(lambda: time.sleep(0.05), reads=[late._var], writes=[late._var],
                      name="slow_producer")
    kv.pushpull(0, late)
    out["late"] = np.unique(late.asnumpy()).tolist()  # (waits for the round)
    out["worker_rounds"] = kv.stats["worker_rounds"] - before
    # ... but not while another store has a request pending (its data could wait for ops
    # queued behind the blocked worker): here one whose producer waits on another pool
    other = pt.kv.create("dist_sync")
    other.init("x", pt.nd.zeros((2,)))
    pt.nd.waitall()
    release, held = threading.Event(), pt.nd.array(np.full(2, rank + 1, np.float32))
    get_engine().push(lambda: release.wait(30), reads=[held._var], writes=[held._var],
                      device="test-pool", name="held_producer")
    other.pushpull("x", held)
    before = kv.stats["worker_rounds"]
    late = pt.nd.array(np.full(sizes[1], rank + 1, np.float32))  # (key 1: no guess armed)
    get_engine().push(lambda: time.sleep(0.05), reads=[late._var], writes=[late._var],
                      name="slow_producer")
    kv.pushpull(1, late)
    out["late_beside_pending"] = np.unique(late.asnumpy()).tolist()
    out["worker_rounds_beside_pending"] = kv.stats["worker_rounds"] - before
    release.set()
    out["held"] = np.unique(held.asnumpy()).tolist()
    phase([([0, 1, 2, 3], r) for r in range(2)])           # arm the guess again
    if rank == 0:                                          # the others joined: zeros
        phase([([0, 1, 2, 3], 100 + r) for r in range(3)])
    out["root"] = kv.join()
    return out


def check_compress(kind: str, rank: int) -> dict:
    kv = pt.kv.create("dist_sync")
    kv.set_gradient_compression({"type": kind} if kind == "fp16" else
                                {"type": "2bit", "threshold": 0.5})
    kv.init("c", pt.nd.zeros((1000,)))
    sums = []
    for round_ in range(3):
        g = pt.nd.array(common.compression_data(rank, round_))
        kv.pushpull("c", g)
        sums.append(g.asnumpy().tolist())
    return {"sums": sums}


def check_checkpoint(out_dir: str, rank: int, workers: int) -> dict:
    """3 linear steps, then rank 0 writes a checkpoint (every rank waits for it)."""
    from portable.checkpoint import CheckpointManager

    w0, x, t = common.linear_problem(workers)
    param, trainer = _linear_trainer("dist_sync", w0)
    rows = common.shard_rows(rank, workers, len(x))
    _linear_steps(param, trainer, x, t, rows, 3, len(x))
    manager = CheckpointManager(os.path.join(out_dir, "ckpt"))
    written = distributed.save_on_root(trainer.kvstore, lambda: str(manager.save(
        {"w": param.data().asnumpy()}, trainer.get_states(), {"epoch": 1, "step": 3})))
    return {"written": written, "files": sorted(os.listdir(manager.directory))}


def check_resume(out_dir: str, rank: int, workers: int) -> dict:
    """Every rank resumes rank 0's checkpoint, then 3 more steps."""
    from portable.checkpoint import CheckpointManager

    w0, x, t = common.linear_problem(workers)
    param, trainer = _linear_trainer("dist_sync", np.zeros_like(w0))
    kv = pt.kv.create("dist_sync")
    checkpoint = distributed.resume(kv, CheckpointManager(os.path.join(out_dir, "ckpt")))
    param.set_data(checkpoint.params["w"])
    trainer.set_states(checkpoint.states, str(checkpoint.path), restore_optimizer=False)
    rows = common.shard_rows(rank, workers, len(x))
    _linear_steps(param, trainer, x, t, rows, 3, len(x))
    return {"w": param.data().asnumpy().tolist(), "step": checkpoint.step}


def main() -> None:
    out_dir, checks = sys.argv[1], sys.argv[2].split(",")
    local = int(sys.argv[4]) if len(sys.argv) > 3 and sys.argv[3] == "--local" else 0
    if local:
        rank, workers, store = -1, local, "local"
    else:
        kv = pt.kv.create("dist_sync")
        rank, workers, store = kv.rank, kv.num_workers, "dist_sync"
    result = {}
    for check in checks:
        if check == "api":
            result[check] = check_api(kv)
        elif check == "linear":
            result[check] = check_linear(store, rank, workers)
        elif check == "mlp":
            info = {}
            result[check] = check_mlp(store, rank, workers, info=info)
            result["mlp_groups"] = info["groups"]
            result["mlp_back_to_back"] = info.get("back_to_back")
        elif check == "mlp_by_key":  # buckets smaller than the model: the Trainer pushes
            store_by_key = pt.kv.create("dist_sync", bucket_size_mb=1e-4)  # key by key
            info = {}
            result[check] = check_mlp(store_by_key, rank, workers, info=info)
            result["mlp_by_key_groups"] = info["groups"]
        elif check == "mlp_two_groups":  # a bucket of 300 bytes: the last three tensors
            store_two = pt.kv.create("dist_sync", bucket_size_mb=300 / (1 << 20))  # (268 B)
            info = {}                                          # travel as one group
            result[check] = check_mlp(store_two, rank, workers, info=info)
            result["mlp_two_groups_groups"] = info["groups"]
        elif check == "hier_linear":
            result[check] = check_linear("dist_sync_hierarchical", rank, workers)
        elif check == "hier_api":
            result[check] = check_api(pt.kv.create("dist_sync_hierarchical"))
        elif check == "uneven":
            result[check] = check_uneven(store, rank, workers)
        elif check == "mixed":
            result[check] = check_mixed(rank)
        elif check == "declared":
            result[check] = check_declared(rank, "dist_sync")
        elif check == "hier_declared":
            result[check] = check_declared(rank, "dist_sync_hierarchical")
        elif check == "speculate":
            result[check] = check_speculate(rank, workers)
        elif check in ("2bit", "fp16"):
            result[check] = check_compress(check, rank)
        elif check == "store_update":
            result[check] = check_store_update(out_dir, rank, workers)
        elif check == "checkpoint":
            result[check] = check_checkpoint(out_dir, rank, workers)
        elif check == "resume":
            result[check] = check_resume(out_dir, rank, workers)
        else:
            raise SystemExit(f"unknown check {check!r}")
    common.write_result(out_dir, max(rank, 0), result)


if __name__ == "__main__":
    main()
