"""Data-parallel scaling of the ``dist_sync`` stores at 8, 16 (or 32) emulated ranks on one
machine: each rank's compute is a sleep taken from a per-layer ResNet-50 profile (a V100's,
from published figures, or ``--profile FILE``: :mod:`scaling_model`), while the real KVStore
moves gradients of the real sizes; the same steps with hand-written mpi4py loops are the peers,
timed in the same job. Prints one JSON line.

    python benchmarks/scaling_sim.py [--ranks 8 16] [--scale 0.25] [--size-scale S]
        [--node-size 4] [--bucket-mb B] [--rounds 3] [--steps 2] [--profile FILE]
        [--store-push trainer [by_key reverse]] [--breakdown] [--plot out.png]

Why sleeps: the ranks are oversubscribed (16 on 2 cores) and a sleeping rank leaves the cores
to the ranks that communicate, as a GPU computing would leave its host. Each sleep runs to a
deadline counted from the step's start (a GPU computes whatever its host threads do), so a late
wake-up does not delay the rest of the emulated backward. ``--scale`` multiplies the sleeps and
the tensor sizes (``--size-scale`` the sizes alone), so that a run takes minutes; the bucket is
the store's one-machine default (2 MB) times the size scale, so a step has as many buckets as
at full size. Both are reported. At the default (sizes scaled as the sleeps), this machine's
loopback makes communication several times the compute; ``--scale 1 --size-scale 0.015625``
keeps the V100's times with 1/64 of the sizes, where communication fits inside backward and
the overlap (``hidden_fraction``) is what decides.

Variants, each timed for full steps and for ``comm`` steps (the same synchronisation with no
compute, every gradient ready at once):

* ``store`` (``mode`` flat: ``dist_sync``; hier: ``dist_sync_hierarchical`` with
  ``ranks_per_node=--node-size``, the ``PORTABLE_KV_NODE_SIZE`` option, so that consecutive
  ranks form emulated nodes), driven as ``gluon.Trainer`` drives it: the forward and one engine
  op per backward layer (reading and writing a chain variable, writing its layer's gradients)
  are pushed, then one ``pushpull`` per bucket-sized run of keys (priority -its first key),
  runs filled from the last key back, then ``wait_all``; the gradients lie back to back in
  one buffer in key order, as ``Trainer`` lays them out under ``dist_sync``. ``--store-push``
  adds other ways of driving it (``by_key``: key by key in key order, as ``Trainer`` did
  before it pushed in groups; ``reverse``: key by key in backward order).
* ``peer``: the hand-written loop in the program's thread: the same deadlines, the same buffer
  cut into the same buckets (slices from the end, as backward fills it); a bucket is started
  the moment its last gradient exists (``Iallreduce``; two-level: ``Ireduce`` in the node,
  ``Iallreduce`` among node leaders, ``Ibcast`` in the node) and all are waited at the end of
  the step. While it sleeps it calls ``Testall`` every ``--peer-poll-ms`` (Open MPI moves
  non-blocking collectives only inside MPI calls). ``--peer-host-ms X`` makes each of its
  steps (and the thread peer's) start with X ms of CPU work, as the store's program thread
  spends its ``host_ms_per_step`` pushing the step's ops: on a machine with fewer cores than
  ranks, what one rank computes at the start of a step delays the ranks still finishing the
  previous one, so this shows what the same host work costs the hand-written loop.
* ``thread_peer``: a thread making one blocking call per bucket (``Allreduce``, or
  ``Reduce``/``Allreduce``/``Bcast``), as the stores' reducers do: the store's design with none
  of its bookkeeping (no negotiation, no engine op, no per-key work).
* ``engine_peer``: the peer's loop driven by the store variant's engine ops (the same forward
  and backward ops; an ``INLINE`` op per backward op hands its buckets to the program's
  thread, which starts them and polls MPI meanwhile): what the store's machinery costs beside
  hand-written calls in the same engine-driven step (``store_over_engine_peer``), apart from
  what the engine ops cost beside the peer's bare sleeps (``engine_peer.over_peer``).
* ``engine_only``: the emulated compute pushed to the engine with no store (its cost).

Per variant: ``step_ms`` (median over timed steps of the slowest rank's step, with its IQR),
``efficiency`` = one rank's step (forward + backward sleeps) / ``step_ms``, ``comm_ms`` (the
comm steps), ``hidden_fraction`` = (compute + comm - step) / comm clipped to [0, 1],
``cpu_ms_per_step`` (CPU seconds of a rank's process per step, all threads, MPI's spinning
included: on 2 cores every rank's CPU is every other rank's wait); for the stores also
``host_ms_per_step``, the program thread's CPU pushing a step (the emulated compute's engine
ops and the ``pushpull`` calls), paid at the step's start. ``store_over_peer`` is the
median over rounds of the peer's step over the store's (above 1: the store is faster), with its
min-max. Variants alternate block by block, the first of each round rotating; each block's
first step and round 0 warm up; the sums are checked after the timing. ``--breakdown`` adds the
store's CPU per step by part (wrapping its methods; :class:`scaling_peers.Breakdown`).

``model`` is the alpha-beta estimate (:func:`scaling_model.pipeline`) at ``--model-ranks``
(256) of the unscaled profile on a ``--net-gbps`` (100 Gb/s), ``--net-latency-us`` (5 us)
network, for this run's bucket at full size and for the store's across-machine default
(25 MB), its assumptions stated in the JSON. ``model_check`` runs the same model, fitted to
this machine's loopback (alpha, beta from raw ``Allreduce`` calls in the job), on the scaled
profile, beside the measured peer.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [HERE, REPO]

import scaling_model as model  # noqa: E402  (helpers next to this script)
import scaling_peers as peers_mod  # noqa: E402
# the store's default buckets: on one machine, and across machines
from portable.kvstore.fusion import DEFAULT_BUCKET_MB as ACROSS_MACHINES_BUCKET_MB  # noqa: E402
from portable.kvstore.fusion import NODE_LOCAL_BUCKET_MB  # noqa: E402


def store_push_groups(order: str, sizes: list[int], bucket_numel: int) -> list[list[int]]:
    """The ``pushpull`` calls of one step: ``trainer``: as ``gluon.Trainer.allreduce_grads``
    makes them (:func:`portable.gluon.trainer.gradient_groups`: bucket-sized runs of keys
    filled from the last layer back, priority -first key); ``by_key``: key by key in key order
    (priority -key); ``reverse``: key by key in backward order."""
    from portable.gluon.trainer import gradient_groups

    if order == "trainer":  # (float32 gradients; the store's group_bytes is its bucket)
        return gradient_groups([4 * n for n in sizes], 4 * bucket_numel)
    keys = list(range(len(sizes)))
    return [[k] for k in (reversed(keys) if order == "reverse" else keys)]


def worker(args: argparse.Namespace) -> None:
    """One rank (under mpiexec); rank 0 prints the JSON line."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: where a rank is
    import portable as pt
    from mpi4py import MPI
    from portable.engine import INLINE, get_engine

    comm = MPI.COMM_WORLD.Dup()
    rank, p = comm.Get_rank(), comm.Get_size()
    prof = model.load_profile(args.profile, args.step_ms).scaled(args.scale, args.size_scale)
    sizes = [t["numel"] for t in prof.tensors]
    bucket_numel = max(1, int(args.bucket_mb * (1 << 20) // 4))
    ops = model.backward_ops(prof.tensors)
    buckets = model.slice_buckets(prof.tensors, bucket_numel)
    ready_after: list[list[tuple[int, int]]] = [[] for _ in ops]
    for start, stop, op in buckets:
        ready_after[op].append((start, stop))
    fwd_s = prof.forward_ms / 1e3
    deadlines = [fwd_s + ms / 1e3 for _, ms in ops]
    compute_s = prof.compute_ms / 1e3

    # -- the stores, driven as gluon.Trainer drives them -----------------------------------
    breakdown = peers_mod.Breakdown() if args.breakdown else None
    engine = get_engine()
    cpu = pt.cpu()
    grads = pt.nd.contiguous_zeros(sizes)
    keys = list(range(len(sizes)))
    kvs = {"flat": pt.kv.create("dist_sync", bucket_size_mb=args.bucket_mb),
           "hier": pt.kv.create("dist_sync_hierarchical", bucket_size_mb=args.bucket_mb,
                                ranks_per_node=args.node_size)}
    for kv in kvs.values():
        kv.init(keys, grads)
        if "trainer" in args.store_push:  # Trainer declares its groups: each one request
            for group in store_push_groups("trainer", sizes, bucket_numel):
                kv.declare_group(group)
    pt.nd.waitall()
    chain = engine.new_var("emulated-backward")
    stores = {}  # variant -> (store, pushpull calls of a step)
    for mode, kv in kvs.items():
        for i, order in enumerate(args.store_push):
            name = f"store_{mode}" if i == 0 else f"store_{mode}+{order}"
            stores[name] = (kv, store_push_groups(order, sizes, bucket_numel))

    def sleeper(deadline: float):
        return lambda: peers_mod.sleep_until(deadline)

    def push_compute(t0: float, handed=None) -> None:
        """The emulated forward and backward as engine ops; ``handed(spans)`` runs as each
        backward op's buckets exist (``INLINE``, in the thread that finished the op)."""
        engine.push(sleeper(t0 + fwd_s), reads=[chain], writes=[chain], device=cpu,
                    name="forward")
        for (indices, _), deadline, spans in zip(ops, deadlines, ready_after):
            produced = [grads[i]._var for i in indices]
            engine.push(sleeper(t0 + deadline), reads=[chain], writes=[chain] + produced,
                        device=cpu, name=f"backward[{indices[-1]}]")
            if handed is not None and spans:
                engine.push(lambda spans=spans: handed(spans), reads=produced, device=INLINE,
                            name="buckets-ready")

    host_s: dict = {}  # store variant -> the program thread's CPU pushing its steps

    def store_step(kv, groups: list[list[int]], compute: bool, variant: str = "") -> float:
        t0 = time.perf_counter()
        host = time.thread_time()
        if compute:
            push_compute(t0)
        push_cpu = time.thread_time()
        for group in groups:
            if len(group) == 1:
                kv.pushpull(group[0], grads[group[0]], priority=-group[0])
            else:
                kv.pushpull(group, [grads[i] for i in group], priority=-group[0])
        pushed = time.thread_time()
        if compute:
            host_s[variant] = host_s.get(variant, 0.0) + pushed - host
        if breakdown is not None and groups:
            breakdown.add("push", pushed - push_cpu, len(groups))
        engine.wait_all()
        return time.perf_counter() - t0

    # -- the hand-written peers ------------------------------------------------------------
    flat_buffer = np.zeros(sum(sizes), np.float32)
    node = comm.Split(rank // args.node_size, rank)
    leaders = comm.Split(0 if node.Get_rank() == 0 else MPI.UNDEFINED, rank)
    flat_reduce, two_level_reduce = peers_mod.blocking_reducers(
        comm.Dup(), node.Dup(), leaders.Dup() if leaders != MPI.COMM_NULL else leaders, MPI)
    peers = {"peer_flat": peers_mod.FlatPeer(comm.Dup(), MPI),
             "peer_hier": peers_mod.TwoLevelPeer(node, leaders, MPI),
             "thread_flat": peers_mod.ThreadPeer(flat_reduce),
             "thread_hier": peers_mod.ThreadPeer(two_level_reduce),
             "engine_flat": peers_mod.FlatPeer(comm.Dup(), MPI),
             "engine_hier": peers_mod.TwoLevelPeer(
                 node.Dup(), leaders.Dup() if leaders != MPI.COMM_NULL else leaders, MPI)}
    poll_s = args.peer_poll_ms / 1e3

    def peer_step(peer, compute: bool) -> float:
        t0 = time.perf_counter()
        if compute:
            peers_mod.busy(args.peer_host_ms / 1e3)
            peers_mod.sleep_until(t0 + fwd_s)
            for place, deadline in enumerate(deadlines):
                peers_mod.sleep_until(t0 + deadline, peer.progress, poll_s)
                for start, stop in ready_after[place]:
                    peer.start(flat_buffer[start:stop])
        else:
            for start, stop, _ in buckets:
                peer.start(flat_buffer[start:stop])
        peer.finish()
        return time.perf_counter() - t0

    def engine_peer_step(peer, compute: bool) -> float:
        """The peer's loop driven by the store variant's engine ops: the program's thread
        starts each backward op's buckets once handed them, polling MPI meanwhile."""
        if not compute:
            return peer_step(peer, False)
        t0 = time.perf_counter()
        ready: queue.SimpleQueue = queue.SimpleQueue()
        push_compute(t0, ready.put)
        started = 0
        while started < len(buckets):
            try:
                spans = ready.get(timeout=poll_s)
            except queue.Empty:
                peer.progress()
                continue
            for start, stop in spans:
                peer.start(flat_buffer[start:stop])
            started += len(spans)
        peer.finish()
        engine.wait_all()
        return time.perf_counter() - t0

    def run(variant: str, compute: bool) -> float:
        if variant == "engine_only":
            return store_step(None, [], True)
        if variant in stores:
            return store_step(*stores[variant], compute, variant)
        if variant.startswith("engine_"):
            return engine_peer_step(peers[variant], compute)
        return peer_step(peers[variant], compute)

    # -- alternated rounds -----------------------------------------------------------------
    blocks = [(v, c) for v in [*stores, *peers] for c in (True, False)] + [("engine_only", True)]
    samples: dict = {b: [] for b in blocks}  # per round: this rank's timed steps
    cpu_s = dict.fromkeys(blocks, 0.0)  # this rank's CPU seconds (all its threads)
    counted = ("requests", "rounds", "buckets", "bytes", "speculated", "worker_rounds")
    counts = {v: dict.fromkeys(counted, 0) for v in stores}
    parts: dict = {}  # --breakdown: block -> {part: [CPU seconds, calls]}
    host_total: dict = {}  # store variant -> program-thread CPU pushing its timed steps
    started = time.perf_counter()
    for rnd in range(args.rounds + 1):  # round 0 warms up
        turn = rnd % len(blocks)
        for block in blocks[turn:] + blocks[:turn]:
            variant, compute = block
            comm.Barrier()
            run(variant, compute)  # (warm-up step; round 0 only warms every block up)
            if not rnd:
                continue
            kv = stores[variant][0] if variant in stores and compute else None
            before = kv.stats if kv is not None else None
            parts_before = breakdown.snapshot() if breakdown is not None else None
            cpu_before = time.process_time()
            host_s.pop(variant, None)  # (the warm-up step's push is not counted)
            times = [run(variant, compute) for _ in range(args.steps)]
            if variant in host_s:
                host_total[variant] = host_total.get(variant, 0.0) + host_s[variant]
            samples[block].append(times)
            cpu_s[block] += time.process_time() - cpu_before
            if before is not None:
                after = kv.stats
                for key in counted:
                    counts[variant][key] += after[key] - before[key]
            if parts_before is not None and variant in stores:
                into = parts.setdefault(block, {})
                for part, (seconds, calls) in breakdown.snapshot().items():
                    was = parts_before.get(part, (0.0, 0))
                    got = into.setdefault(part, [0.0, 0])
                    got[0] += seconds - was[0]
                    got[1] += calls - was[1]
    elapsed = time.perf_counter() - started
    timed_steps = args.rounds * args.steps

    # -- the sums are right (checked outside the timing) -----------------------------------
    correct = {}
    for variant in [*stores, *peers]:
        if variant in stores:
            for g in grads:
                g[:] = rank + 1
            pt.nd.waitall()
            run(variant, True)
            got = np.concatenate([g.asnumpy().reshape(-1) for g in grads])
            for g in grads:
                g[:] = 0
            pt.nd.waitall()
        else:
            flat_buffer[:] = rank + 1
            run(variant, True)
            got, flat_buffer[:] = flat_buffer.copy(), 0
        ok = np.array([int(np.allclose(got, p * (p + 1) / 2))])
        comm.Allreduce(MPI.IN_PLACE, ok, op=MPI.MIN)
        correct[variant] = bool(ok[0])
    loopback = peers_mod.fit_loopback(comm, MPI, bucket_numel)

    # -- gather: the slowest rank per step, the mean CPU per rank --------------------------
    slowest = {}
    for block, rounds in samples.items():
        arr = np.array(rounds, np.float64)
        comm.Allreduce(MPI.IN_PLACE, arr, op=MPI.MAX)
        slowest[block] = arr  # [round, step]
    per_rank_step = p * max(1, timed_steps)
    cpu_ms = {}
    for block, seconds in cpu_s.items():
        total = np.array([seconds])
        comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
        cpu_ms[block] = float(total[0]) / per_rank_step * 1e3
    host_ms = {}
    for variant in stores:
        total = np.array([host_total.get(variant, 0.0)])
        comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
        host_ms[variant] = float(total[0]) / per_rank_step * 1e3
    breakdown_ms = {}
    if breakdown is not None:
        labels = peers_mod.Breakdown.LABELS
        for block in (b for b in blocks if b[0] in stores):
            got = parts.get(block, {})
            arr = np.array([got.get(part, [0.0, 0]) for part in labels], np.float64)
            comm.Allreduce(MPI.IN_PLACE, arr, op=MPI.SUM)
            breakdown_ms[block[0] + ("" if block[1] else " (comm only)")] = {
                part: {"cpu_ms": round(arr[i, 0] / per_rank_step * 1e3, 3),
                       "calls": round(arr[i, 1] / per_rank_step, 2)}
                for i, part in enumerate(labels)}
    for kv in kvs.values():
        kv.close()
    if rank != 0:
        return

    def summary(variant: str, against: str | None = None) -> dict:
        full_steps, comm_steps = slowest[(variant, True)], slowest[(variant, False)]
        step, comm_only = float(np.median(full_steps)), float(np.median(comm_steps))
        hidden = (compute_s + comm_only - step) / comm_only if comm_only > 0 else 1.0
        out = {"step_ms": round(step * 1e3, 3),
               "step_ms_iqr": [round(float(q) * 1e3, 3)
                               for q in np.percentile(full_steps, [25, 75])],
               "efficiency": round(compute_s / step, 4),
               "comm_ms": round(comm_only * 1e3, 3),
               "hidden_fraction": round(min(1.0, max(0.0, hidden)), 4),
               "cpu_ms_per_step": round(cpu_ms[(variant, True)], 2),
               "comm_cpu_ms_per_step": round(cpu_ms[(variant, False)], 2),
               "sums_correct": correct[variant]}
        if variant in host_ms:
            out["host_ms_per_step"] = round(host_ms[variant], 3)
        if variant in counts:
            c, n = counts[variant], max(1, timed_steps)
            out.update({"requests_per_step": round(c["requests"] / n, 2),
                        "rounds_per_step": round(c["rounds"] / n, 2),
                        "buckets_per_step": round(c["buckets"] / n, 2),
                        "mean_bucket_kb": round(c["bytes"] / max(1, c["buckets"]) / 1024, 1),
                        "speculated_rounds_per_step": round(c["speculated"] / n, 2),
                        "worker_rounds_per_step": round(c["worker_rounds"] / n, 2)})
        if against is not None:  # per round: the other's median step over this one's
            ratios = [float(np.median(b)) / float(np.median(a)) for a, b in
                      zip(slowest[(variant, True)], slowest[(against, True)])]
            out["over_peer"] = {"median": round(statistics.median(ratios), 3),
                                "min": round(min(ratios), 3), "max": round(max(ratios), 3)}
        return out

    configs = []
    for mode in kvs:
        store, peer = f"store_{mode}", f"peer_{mode}"
        result = {"ranks": p, "mode": mode, "store_push": args.store_push[0],
                  **summary(store, peer), "peer": summary(peer),
                  "thread_peer": summary(f"thread_{mode}", peer),
                  "engine_peer": summary(f"engine_{mode}", peer)}
        result["store_over_engine_peer"] = summary(store, f"engine_{mode}")["over_peer"]
        result["store_over_peer"] = result.pop("over_peer")
        others = {name.split("+")[1]: summary(name, peer) for name in stores
                  if name.startswith(store + "+")}
        if others:
            result["other_store_push"] = others
        if mode == "hier":
            result.update(node_size=args.node_size, nodes=-(-p // args.node_size))
        configs.append(result)
    engine_only = float(np.median(slowest[("engine_only", True)]))
    extra = {"store_cpu_breakdown_ms_per_step_per_rank": breakdown_ms} if breakdown_ms else {}
    fitted = model.pipeline(prof, p, bucket_numel * 4, loopback["alpha_us"], loopback["gbps"])
    print(json.dumps({
        "ranks": p, "configs": configs, "seconds": round(elapsed, 1),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "engine_only": {"step_ms": round(engine_only * 1e3, 3),
                        "over_compute": round(engine_only / compute_s, 4),
                        "cpu_ms_per_step": round(cpu_ms[("engine_only", True)], 2)},
        "model_check": {"loopback_fit": loopback, "flat_predicted": fitted,
                        "flat_measured_peer_efficiency": configs[0]["peer"]["efficiency"]},
        **extra}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--scale", type=float, default=0.25,
                        help="factor on the sleeps and the tensor sizes")
    parser.add_argument("--size-scale", type=float, default=None,
                        help="factor on the tensor sizes only (default: --scale)")
    parser.add_argument("--step-ms", type=float, default=model.STEP_MS,
                        help="one-rank step of the built-in profile before scaling")
    parser.add_argument("--profile", default=None, help="JSON [{name, numel, backward_ms}]")
    parser.add_argument("--node-size", type=int, default=4, help="ranks per emulated node")
    parser.add_argument("--bucket-mb", type=float, default=None,
                        help=f"fusion bucket of the stores and the peer (default "
                             f"{NODE_LOCAL_BUCKET_MB:g} MB times the size scale)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per block")
    parser.add_argument("--peer-poll-ms", type=float, default=1.0)
    parser.add_argument("--peer-host-ms", type=float, default=0.0,
                        help="CPU work (ms) at the start of each of the peers' steps, as the "
                             "store's program thread spends pushing a step (default 0)")
    parser.add_argument("--breakdown", action="store_true",
                        help="report the store's CPU per step by part (wraps its methods)")
    parser.add_argument("--store-push", choices=("trainer", "by_key", "reverse"), nargs="+",
                        default=["trainer"],
                        help="how the stores are driven: the first is reported as the store, "
                             "the others beside it (default: as gluon.Trainer does)")
    parser.add_argument("--model-ranks", type=int, default=256)
    parser.add_argument("--net-gbps", type=float, default=100.0)
    parser.add_argument("--net-latency-us", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per job")
    parser.add_argument("--plot", default=None, help="write a PNG of efficiency vs ranks")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.size_scale is None:
        args.size_scale = args.scale
    if args.bucket_mb is None:
        args.bucket_mb = NODE_LOCAL_BUCKET_MB * args.size_scale
    if args.worker:
        worker(args)
        return
    from portable.distributed.launch import build_command

    env = {"PYTHONPATH": REPO, "PORTABLE_CPU_WORKERS": "1", "OMP_NUM_THREADS": "1",
           "OPENBLAS_NUM_THREADS": "1", "PORTABLE_KV_TIMEOUT": str(int(args.timeout))}
    results = []
    for ranks in args.ranks:
        worker_args = [sys.executable, os.path.abspath(__file__), "--worker",
                       "--scale", repr(args.scale), "--size-scale", repr(args.size_scale),
                       "--bucket-mb", repr(args.bucket_mb), "--step-ms", repr(args.step_ms),
                       "--node-size", str(args.node_size), "--rounds", str(args.rounds),
                       "--steps", str(args.steps), "--peer-poll-ms", repr(args.peer_poll_ms),
                       "--peer-host-ms", repr(args.peer_host_ms),
                       "--store-push", *args.store_push] + (["--breakdown"] if args.breakdown
                                                            else [])
        if args.profile:
            worker_args += ["--profile", os.path.abspath(args.profile)]
        cmd = build_command(worker_args, ranks, env=env)
        try:
            out = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True,
                                 text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired as exc:
            results.append({"ranks": ranks, "error": f"timed out after {exc.timeout} s"})
            continue
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode != 0 or not lines:
            results.append({"ranks": ranks, "error": (out.stderr or out.stdout)[-3000:]})
        else:
            results.append(json.loads(lines[-1]))
    configs = [c for r in results for c in r.get("configs", [])]
    flat_top = max((c for c in configs if c["mode"] == "flat"), key=lambda c: c["ranks"],
                   default=None)
    at16 = {c["mode"]: c["store_over_peer"]["median"] for c in configs if c["ranks"] == 16}
    full = model.load_profile(args.profile, args.step_ms)
    report = {"benchmark": "scaling_sim", "cpu_count": os.cpu_count(),
              "profile": {"source": full.source, "tensors": len(full.tensors),
                          "params": sum(t["numel"] for t in full.tensors),
                          "one_rank_step_ms_unscaled": round(full.compute_ms, 2),
                          "scale": args.scale, "size_scale": args.size_scale,
                          "one_rank_step_ms": round(full.scaled(args.scale, args.size_scale)
                                                    .compute_ms, 3)},
              "bucket_mb": args.bucket_mb, "node_size": args.node_size,
              "peer_poll_ms": args.peer_poll_ms, "peer_host_ms": args.peer_host_ms,
              "store_push": args.store_push,
              "rounds": args.rounds, "steps": args.steps,
              "results": results,
              "model": model.estimate(
                  full, args.model_ranks,
                  sorted({args.bucket_mb / args.size_scale, ACROSS_MACHINES_BUCKET_MB}),
                  args.net_gbps, args.net_latency_us,
                  flat_top["rounds_per_step"] if flat_top else None,
                  flat_top["ranks"] if flat_top else None)}
    # issue 19: the store at least as efficient as the hand-written loop at 16 ranks (only
    # against loops doing no host work: --peer-host-ms is a diagnostic)
    if at16 and not args.peer_host_ms:
        report["target_16_ranks"] = {"store_over_peer": at16,
                                     "met": all(ratio >= 1.0 for ratio in at16.values())}
    if args.plot:
        peers_mod.plot(results, args.plot)
        report["plot"] = args.plot
    print(json.dumps(report), flush=True)
    if any("error" in r for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
