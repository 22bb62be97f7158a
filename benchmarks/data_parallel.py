"""Data-parallel training throughput of LeNet and an MLP on digits with ``dist_sync``: samples
per second on 1 and on N ranks (one compute thread each, the same batch per rank), the scaling
efficiency, and how much of the communication time the overlap with backward hid. Prints one
JSON object.

    python benchmarks/data_parallel.py [--ranks 2] [--models mlp lenet] [--batch 64]
                                       [--steps 20] [--rounds 10] [--hybridize] [--bucket-mb X]

The driver launches itself under mpiexec with N ranks; every phase is timed in that one job,
and the phases are interleaved round by round so that they share the machine's noise:

* ``single``: rank 0 trains alone (the others wait): the one-rank throughput;
* ``compute``: every rank trains on its own (local store): compute under N-rank contention;
* ``dist``: every rank trains with ``dist_sync`` (a model that fits one fusion bucket is sent
  as one group after backward; a larger one, or ``--bucket-mb`` smaller than the model, key by
  key, overlapping backward);
* ``comm``: every rank only synchronises the gradients, as ``Trainer.step`` does (no compute);
* ``raw``: the peer: the same training with the gradients summed by hand-written ``mpi4py``
  (wait for backward, one ``Allreduce`` of the packed gradients, unpack, update), the usual
  blocking data-parallel loop with no store, no engine op and no background thread.

Each rank is bound to a core of its own when there are enough (Open MPI). Efficiency =
throughput(dist) / (N * throughput(single)). It counts two losses: contention
(N ranks sharing the machine's cores, memory and caches: compute over single) and
communication (dist over compute); ``compute_over_dist`` isolates the second, and
``dist_over_raw`` compares the store with the hand-written loop (above 1: the store is
faster). Hidden
communication = compute + comm - dist (per step), as a share of comm. Imperative (not
hybridized) models are the default: their backward is one engine op per layer, so key-by-key
communication of the last layers can start early; a hybridized backward is one op and hides
nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(models: list[str], batch: int, steps: int, rounds: int, hybridize: bool,
           bucket_mb: float | None) -> None:
    sys.path.insert(0, REPO)
    import portable as pt
    from mpi4py import MPI
    from portable import gluon
    from portable.data.digits import load_digits_split
    from portable.models.zoo import get_model

    comm = MPI.COMM_WORLD.Dup()
    kv = pt.kv.create("dist_sync")
    rank, workers = kv.rank, kv.num_workers
    split = load_digits_split(seed=0)
    x = split.x_train[rank::workers]
    y = split.y_train[rank::workers]
    rng = np.random.default_rng(rank)
    batches = [rng.choice(len(x), batch, replace=False) for _ in range(steps)]
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def build(name: str, store) -> tuple:
        pt.random.seed(0)
        net = get_model(name, num_classes=10)
        net.initialize(pt.init.Xavier())
        net(pt.nd.array(x[:2]))
        if hybridize:
            net.hybridize()
        trainer = gluon.Trainer(net.collect_params(), "sgd",
                                {"learning_rate": 0.05, "momentum": 0.9}, kvstore=store)
        return net, trainer

    def train(net, trainer, global_batch: int) -> None:
        for rows in batches:
            with pt.autograd.record():
                loss = loss_fn(net(pt.nd.array(x[rows])), pt.nd.array(y[rows]))
            loss.backward()
            trainer.step(global_batch)
        pt.nd.waitall()

    def train_by_hand(net, trainer, global_batch: int) -> None:
        grads = [p.list_grad()[0] for p in net.collect_params().values()]
        packed = np.empty(sum(g.size for g in grads), np.float32)
        for rows in batches:
            with pt.autograd.record():
                loss = loss_fn(net(pt.nd.array(x[rows])), pt.nd.array(y[rows]))
            loss.backward()
            np.concatenate([g.asnumpy().reshape(-1) for g in grads], out=packed)
            comm.Allreduce(MPI.IN_PLACE, packed, op=MPI.SUM)
            at = 0
            for g in grads:
                g[:] = packed[at:at + g.size].reshape(g.shape)
                at += g.size
            trainer.update(global_batch)
        pt.nd.waitall()

    def slowest(seconds: float) -> float:
        out = np.zeros(1)
        comm.Allreduce(np.array([seconds]), out, op=MPI.MAX)
        return float(out[0])

    report = {}
    for name in models:
        # one store per model: keys are parameter indices
        store = pt.kv.create("dist_sync", bucket_size_mb=bucket_mb)
        local_net, local_trainer = build(name, "local")
        dist_net, dist_trainer = build(name, store)
        raw_net, raw_trainer = build(name, "local")
        train(dist_net, dist_trainer, batch * workers)  # warm up (and init the keys)
        train(local_net, local_trainer, batch)
        train_by_hand(raw_net, raw_trainer, batch * workers)
        grads = [p.list_grad()[0] for p in dist_net.collect_params().values()]

        def comm_only() -> None:
            for _ in range(steps):
                dist_trainer.allreduce_grads()  # what step() sends, as it sends it
            pt.nd.waitall()

        phases = {"single": lambda: train(local_net, local_trainer, batch) if rank == 0
                  else None,
                  "compute": lambda: train(local_net, local_trainer, batch),
                  "dist": lambda: train(dist_net, dist_trainer, batch * workers),
                  "comm": comm_only,
                  "raw": lambda: train_by_hand(raw_net, raw_trainer, batch * workers)}
        samples: dict[str, list[float]] = {phase: [] for phase in phases}
        counted = ("rounds", "speculated", "worker_rounds")
        dist_counts = dict.fromkeys(counted, 0)  # the store's rounds during the dist phase
        for _ in range(rounds):
            for phase, run in phases.items():
                kv.barrier()
                before = store.stats
                start = time.perf_counter()
                run()
                samples[phase].append(slowest(time.perf_counter() - start) / steps)
                if phase == "dist":
                    after = store.stats
                    for key in counted:
                        dist_counts[key] += after[key] - before[key]
        per_step = {phase: statistics.median(values) for phase, values in samples.items()}
        single_rate = batch / per_step["single"]
        dist_rate = batch * workers / per_step["dist"]
        hidden = max(0.0, per_step["compute"] + per_step["comm"] - per_step["dist"])
        report[name] = {
            "seconds_per_step": {k: round(v, 6) for k, v in per_step.items()},
            "samples_per_s_1_rank": round(single_rate, 1),
            f"samples_per_s_{workers}_ranks": round(dist_rate, 1),
            "scaling_efficiency": round(dist_rate / (workers * single_rate), 3),
            "contention_compute_over_single": round(per_step["compute"] / per_step["single"],
                                                    3),
            "compute_over_dist": round(per_step["compute"] / per_step["dist"], 3),
            "comm_seconds_per_step": round(per_step["comm"], 6),
            "collective_rounds_per_step": round(dist_counts["rounds"] / (rounds * steps), 2),
            "guessed_round_fraction": round(dist_counts["speculated"]
                                            / max(1, dist_counts["rounds"]), 3),
            "worker_round_fraction": round(dist_counts["worker_rounds"]
                                           / max(1, dist_counts["rounds"]), 3),
            "raw_mpi4py_scaling_efficiency": round(
                batch * workers / per_step["raw"] / (workers * single_rate), 3),
            "dist_over_raw": round(per_step["raw"] / per_step["dist"], 3),
            "gradients_as_one_group": bool(dist_trainer._grouped),
            "comm_hidden_seconds_per_step": round(hidden, 6),
            "comm_hidden_fraction": round(min(1.0, hidden / per_step["comm"]), 3),
            "parameters": int(sum(g.size for g in grads)), "tensors": len(grads),
        }
    if rank == 0:
        print(json.dumps({"ranks": workers, "batch_per_rank": batch, "steps": steps,
                          "rounds": rounds, "hybridized": hybridize, "models": report}),
              flush=True)


def _one_core_each(ranks: int) -> list[str]:
    """Bind each rank to a core of its own (Open MPI, when there are enough cores): the 1-rank
    phase then runs on one core as each rank of the N-rank phases does. Unbound, its compute and
    Python threads spread over the cores the other ranks leave idle, which made the 1-rank time
    swing between 4.5 and 7.3 ms per MLP step from run to run."""
    from portable.distributed.launch import find_mpiexec, mpi_flavor

    if ranks > (os.cpu_count() or 1) or mpi_flavor(find_mpiexec()) != "openmpi":
        return []
    return ["--bind-to", "core"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--models", nargs="+", default=["mlp", "lenet"])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--hybridize", action="store_true")
    parser.add_argument("--bucket-mb", type=float, default=None,
                        help="fusion bucket; one smaller than the model makes the Trainer push "
                             "key by key, overlapping backward (default: the store's)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.models, args.batch, args.steps, args.rounds, args.hybridize, args.bucket_mb)
        return
    sys.path.insert(0, REPO)
    from portable.distributed.launch import build_command

    one_thread = {"PORTABLE_CPU_WORKERS": "1", "OMP_NUM_THREADS": "1",
                  "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": REPO}
    cmd = build_command([sys.executable, os.path.abspath(__file__), "--worker", "--models",
                         *args.models, "--batch", str(args.batch), "--steps", str(args.steps),
                         "--rounds", str(args.rounds)]
                        + (["--hybridize"] if args.hybridize else [])
                        + ([] if args.bucket_mb is None else ["--bucket-mb", str(args.bucket_mb)]),
                        args.ranks, env=one_thread, mpi_args=_one_core_each(args.ranks))
    out = subprocess.run(cmd, env=dict(os.environ, **one_thread), capture_output=True,
                         text=True, timeout=3600)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        print(json.dumps({"benchmark": "data_parallel", "error": out.stderr[-3000:]}))
        sys.exit(1)
    result = json.loads(lines[-1])
    result.update({"benchmark": "data_parallel", "cpu_count": os.cpu_count(),
                   "target_efficiency": 0.85})
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
