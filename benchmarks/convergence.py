"""Convergence against samples and against bytes communicated: ``dist_sync``, plain
``dist_async`` (algorithm ``sgd``), local SGD and EASGD (MXNET-MPI's Elastic SGD, arXiv
1801.03855) training the same model on scikit-learn's digits with 4 workers. Prints one JSON
line; ``--plot PATH`` draws accuracy against samples and against bytes (log x).

    python benchmarks/convergence.py [--model mlp|lenet] [--epochs 8] [--lr 0.05 ...]
                                     [--batch 16] [--easgd-taus 1 4 16] [--easgd-g1-taus 4 16]
                                     [--local-tau 4] [--target 0.95 ...] [--eval-every 256]
                                     [--repeats 1] [--plot PATH] [--quick]

Configurations (each one ``mpiexec`` job; the same 4 worker processes, plus a parameter-server
rank where the store needs one):

* ``dist_sync``: one allreduce of the gradients per step (4 ranks);
* ``dist_sync_hier``: the same sums (the same training) by ``dist_sync_hierarchical`` with nodes
  of an EASGD group's size: reduced inside each node, allreduced between the 2 node leaders,
  broadcast back (4 ranks);
* ``async_sgd``: ``dist_async`` with ``algorithm="sgd"``: every worker pushes its gradient to
  the server, which applies the optimizer, and pulls the weights back (4 + 1 ranks);
* ``local_sgd_tau{T}``: 4 replicas averaged (allreduce of the weights) every T steps (4 ranks);
* ``easgd_tau{T}``: 2 allreduce groups of 2 workers + 1 server holding the centre, elastic
  exchange every T steps, ``alpha = 0.9 / groups = 0.45`` (the paper's MPI-ESGD layout,
  4 + 1 ranks);
* ``easgd_g1_tau{T}``: EASGD with 4 groups of one worker (the paper's "dist-ESGD"),
  ``alpha = 0.9 / 4`` (4 + 1 ranks).

Everything else is the same in every configuration: the model (an MLP by default: LeNet,
``--model lenet``, runs 2-3 times slower per step on 2 cores, too slow for a default run under
5 minutes), its initial weights and every worker's batch order (``--seed``), the per-worker
batch, and the optimizer: SGD, momentum 0.9, one constant learning rate (a server-side
optimizer cannot follow a schedule keyed on samples). A push sums the gradients of the workers
that share a replica (``dist_sync``: 4; an EASGD group: 2; otherwise 1) and the update uses
their mean. ``--lr`` with several rates runs everything at each (a sweep) and adds the factors
with every configuration at the rate that suited it best.

Rank 0 evaluates, on the held-out test set, the model that would be exported: ``dist_sync``
the parameters, ``async_sgd`` the servers' weights (as rank 0 last pulled them; after training,
pulled again), local SGD the average of the replicas (``pull_center``, collective: every worker
evaluates at the same steps), EASGD the servers' centre (``pull_center``). Every worker
finishes each step before the next (so that counts are of finished work) and publishes its
steps and bytes in a file shared by the ranks; a point's ``samples`` and ``bytes`` are the sums
over the 4 workers at the moment of the evaluation, also when asynchronous workers run ahead
of rank 0 or behind it. Rank 0 evaluates each time the sum passes the next multiple of
``--eval-every`` samples, and once more after every worker finished.

``bytes`` is what the workers' stores moved (``kv.traffic`` sent + received, as the store counts
it: an allreduce of B bytes counts B each way), without the evaluations' own traffic. For
EASGD, ``bytes_between_groups`` leaves out the group's allreduce and broadcast (counted apart
by giving the group's reducer a counter of its own): what goes to and from the servers, the
part that crosses the network when each group shares a node (the paper's setting). For
``dist_sync_hier`` it is the leaders' allreduce between the nodes: what synchronous SGD must
send across the network at every step with the same nodes, the fair baseline for EASGD's
``bytes_between_groups``; for the others it is every byte. Mind what
this implies: an EASGD group of 2 allreduces its gradients at every step, which by itself
counts as many bytes per worker and step as ``dist_sync``'s allreduce (B each way, whatever the
group size), so with groups of 2 EASGD moves more bytes per sample than ``dist_sync`` and can
only need fewer bytes to the target by needing fewer samples; its traffic between the groups
and the servers is what ``tau`` divides.

``to_target`` is the first evaluation at or above ``--target``; ``factors`` divide the
baselines' bytes (and samples) to the target by those of the EASGD configuration that needed
the fewest bytes (above 1: EASGD needed less). With ``--repeats N`` every configuration runs
with N seeds and ``to_target`` is the median. With several targets (``--target 0.97 0.95``)
the first is the top level's and the plot's, and ``to_targets``, ``factors_by_target`` and
``at_best_lr_by_target`` give every figure for each: a target met early in training measures
mostly how fast the first steps go, a later one how well the configuration keeps improving. The first crossing of a target is noisy (the
batch order alone moves it by a quarter); the asynchronous configurations also depend on
timing. The synchronous ones are deterministic for a given seed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS = 4
EASGD_GROUP = 2


# -- the configurations ------------------------------------------------------------------------
def configurations(easgd_taus: list[int], local_tau: int | None,
                   g1_taus: list[int]) -> list[dict]:
    """Name, store settings and server ranks of every configuration to run."""
    configs = [{"name": "dist_sync", "store": "dist_sync", "servers": 0},
               {"name": "dist_sync_hier", "store": "dist_sync_hier", "servers": 0},
               {"name": "async_sgd", "store": "sgd", "servers": 1}]
    if local_tau:
        configs.append({"name": f"local_sgd_tau{local_tau}", "store": "local_sgd",
                        "tau": local_tau, "servers": 0})
    for tau in easgd_taus:
        configs.append({"name": f"easgd_tau{tau}", "store": "easgd", "tau": tau,
                        "group_size": EASGD_GROUP, "servers": 1})
    for tau in g1_taus:
        configs.append({"name": f"easgd_g1_tau{tau}", "store": "easgd", "tau": tau,
                        "group_size": 1, "servers": 1})
    return configs


# -- one rank ------------------------------------------------------------------------------------
# Every worker publishes, after each of its steps, (steps taken, bytes moved, bytes moved
# between groups) in a shared file (all ranks run on this machine): rank 0 reads the sums when
# it evaluates, so a point's samples and bytes are those of every worker at that moment, also
# when asynchronous workers run ahead of rank 0 or behind it.
BOARD = "progress.bin"


def worker(config: dict, out_dir: str) -> None:
    """Train on this rank; rank 0 evaluates and writes ``out_dir/result.json``."""
    sys.path.insert(0, REPO)
    import portable as pt
    from portable import gluon
    from portable.data.digits import load_digits_split
    from portable.distributed import shard
    from portable.kvstore.traffic import Traffic
    from portable.models.zoo import get_model

    store = config["store"]
    group_traffic = None
    if store == "dist_sync":
        kv = pt.kv.create("dist_sync")
    elif store == "dist_sync_hier":  # nodes of an EASGD group's size
        kv = pt.kv.create("dist_sync_hierarchical", ranks_per_node=EASGD_GROUP)
        reducer = kv._queue.reducer
        node_traffic = reducer.traffic  # reduce in the node, broadcast out
        if reducer.cross is not None:  # a leader: its allreduce between the nodes apart
            reducer.cross.traffic = Traffic()
    elif store == "sgd":
        kv = pt.kv.create("dist_async", algorithm="sgd")
    elif store == "local_sgd":
        kv = pt.kv.create("dist_async", algorithm="local_sgd", tau=config["tau"], group_size=1)
    else:
        groups = -(-WORKERS // config["group_size"])
        kv = pt.kv.create("dist_async", algorithm="easgd", tau=config["tau"],
                          group_size=config["group_size"], alpha=0.9 / groups)
        queue = kv._groups.queue
        if queue is not None:  # count the group's allreduce and broadcast apart
            group_traffic = queue.reducer.traffic = Traffic()
    rank, workers = kv.rank, kv.num_workers
    assert workers == WORKERS, workers
    summed = getattr(kv, "gradient_workers",
                     workers if store in ("dist_sync", "dist_sync_hier") else 1)
    board = np.memmap(os.path.join(out_dir, BOARD), dtype=np.int64, mode="r+",
                      shape=(WORKERS, 3))

    split = load_digits_split(seed=0)
    mine = shard(len(split.x_train), kv)  # even: every worker takes as many steps
    x, y = split.x_train[mine], split.y_train[mine]
    batch, epochs, every = config["batch"], config["epochs"], config["eval_every"]
    steps_per_epoch = len(x) // batch

    def build():
        pt.random.seed(config["seed"])
        net = get_model(config["model"], num_classes=10)
        net.initialize(pt.init.Xavier())
        net(pt.nd.array(x[:2]))
        net.hybridize()
        return net

    net = build()
    probe = build()  # the centre (EASGD, local SGD) is pulled into this one, not the replica
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": config["lr"], "momentum": 0.9}, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x_test, y_test = pt.nd.array(split.x_test), split.y_test
    eval_bytes = np.zeros(2, np.int64)  # (all, between groups) moved by evaluations

    def moved() -> np.ndarray:
        """(all bytes, bytes between groups) this worker's store moved so far."""
        t = kv.traffic
        between = t["sent"] + t["received"]
        if store == "dist_sync_hier":
            inside = node_traffic.snapshot()
            cross = reducer.cross.traffic.snapshot() if reducer.cross is not None else None
            between = cross["sent"] + cross["received"] if cross is not None else 0
            return np.array([inside["sent"] + inside["received"] + between, between], np.int64)
        if group_traffic is None:
            return np.array([between, between], np.int64)
        g = group_traffic.snapshot()
        return np.array([between + g["sent"] + g["received"], between], np.int64)

    def publish(step: int) -> None:
        board[rank, 0] = step
        board[rank, 1:] = moved() - eval_bytes

    def accuracy(model) -> float:
        scores = model(x_test).asnumpy()
        return float((scores.argmax(1) == y_test).mean())

    def exported(step: int, final: bool) -> float | None:
        """Accuracy of the model the configuration would export (rank 0; None elsewhere)."""
        if step == 0:  # the same initial weights everywhere (seed 0); nothing to pull yet
            return accuracy(net) if rank == 0 else None
        if store == "local_sgd":  # the average of the replicas (collective)
            for index, param in enumerate(probe.collect_params().values()):
                kv.pull_center(index, out=param.list_data())
            return accuracy(probe) if rank == 0 else None
        if rank != 0:
            return None
        if store == "easgd":  # the servers' centre
            for index, param in enumerate(probe.collect_params().values()):
                kv.pull_center(index, out=param.list_data())
            return accuracy(probe)
        if store == "sgd" and final:  # the servers' weights, every worker's pushes in
            for index, param in enumerate(probe.collect_params().values()):
                kv.pull(index, out=param.list_data())
            return accuracy(probe)
        # dist_sync: the parameters; sgd: the servers' weights as rank 0 last pulled them
        return accuracy(net)

    curve = []

    def evaluate(step: int, final: bool = False) -> None:
        pt.nd.waitall()
        before = moved()
        acc = exported(step, final)
        pt.nd.waitall()
        eval_bytes[:] += moved() - before  # the evaluation's own traffic is not counted
        publish(step)
        if rank == 0:
            totals = board.sum(axis=0)
            curve.append({"samples": int(totals[0]) * batch, "bytes": int(totals[1]),
                          "bytes_between_groups": int(totals[2]), "accuracy": round(acc, 4),
                          "rank0_step": step})

    # local SGD's centre is collective: every worker evaluates at the same steps. Otherwise
    # rank 0 alone evaluates once the workers' samples together pass the next multiple of
    # --eval-every.
    lockstep = store == "local_sgd"
    eval_steps = max(1, every // (batch * workers))
    order = np.random.default_rng([config["seed"], rank])  # this worker's batches
    started = time.perf_counter()
    step, next_eval = 0, every
    evaluate(0)
    for _ in range(epochs):
        perm = order.permutation(len(x))
        for start in range(0, steps_per_epoch * batch, batch):
            rows = perm[start:start + batch]
            with pt.autograd.record():
                loss = loss_fn(net(pt.nd.array(x[rows])), pt.nd.array(y[rows]))
            loss.backward()
            trainer.step(batch * summed)  # the mean gradient of the workers that share it
            # (the engine would run ahead of Python: finish the step, so that the board
            # counts finished steps and the bytes they moved)
            pt.nd.waitall()
            step += 1
            publish(step)
            if lockstep:
                if step % eval_steps == 0:
                    evaluate(step)
            elif rank == 0:
                samples = int(board[:, 0].sum()) * batch
                if samples >= next_eval:
                    evaluate(step)
                    next_eval = (samples // every + 1) * every
    pt.nd.waitall()
    seconds = time.perf_counter() - started
    if hasattr(kv, "join"):
        kv.join()  # every worker is done: the final point sees all their steps
    evaluate(step, final=True)
    if rank == 0:
        result = {"curve": curve, "seconds": seconds, "steps_per_worker": step,
                  "gradient_workers": summed, "parameters": int(sum(
                      p.data().size for p in net.collect_params().values()))}
        if store in ("easgd", "local_sgd"):
            result.update(tau=kv.tau, group_size=kv.group_size, groups=kv.num_groups)
        if store == "easgd":
            result["alpha"] = kv.alpha
        path = os.path.join(out_dir, "result.json")
        with open(path + ".tmp", "w") as handle:
            json.dump(result, handle)
        os.replace(path + ".tmp", path)
    if hasattr(kv, "close"):
        kv.close()


# -- the driver ----------------------------------------------------------------------------------
def run_config(config: dict, timeout: float) -> dict:
    """Run one configuration under mpiexec; return its curve and summary."""
    from portable.distributed.launch import build_command

    out_dir = tempfile.mkdtemp(prefix=f"convergence-{config['name']}-")
    try:
        np.zeros((WORKERS, 3), np.int64).tofile(os.path.join(out_dir, BOARD))
        one_thread = {"PORTABLE_CPU_WORKERS": "1", "OMP_NUM_THREADS": "1",
                      "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": REPO,
                      "PORTABLE_KV_TIMEOUT": "300"}
        if config["servers"]:
            one_thread["PORTABLE_KV_SERVERS"] = str(config["servers"])
        cmd = build_command([sys.executable, os.path.abspath(__file__), "--worker",
                             json.dumps(config), out_dir], WORKERS, config["servers"],
                            env=one_thread)
        started = time.perf_counter()
        try:
            done = subprocess.run(cmd, env=dict(os.environ, **one_thread),
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"did not finish within {timeout} s"}
        wall = time.perf_counter() - started
        path = os.path.join(out_dir, "result.json")
        if done.returncode != 0 or not os.path.exists(path):
            return {"error": f"exit code {done.returncode}: {done.stderr[-3000:]}"}
        with open(path) as handle:
            first = json.load(handle)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    points = first["curve"]
    summary = {"ranks": WORKERS + config["servers"], "servers": config["servers"],
               "gradient_workers": first["gradient_workers"],
               "parameters": first["parameters"], "steps_per_worker": first["steps_per_worker"],
               "train_seconds": round(first["seconds"], 2), "job_seconds": round(wall, 2)}
    for key in ("tau", "group_size", "groups", "alpha"):
        if key in first:
            summary[key] = first[key]
    summary["final_accuracy"] = points[-1]["accuracy"]
    summary["best_accuracy"] = max(p["accuracy"] for p in points)
    summary["curve"] = points
    return summary


def to_target(points: list[dict], target: float) -> dict | None:
    """The first evaluation at or above ``target`` (None: never reached)."""
    for point in points:
        if point["accuracy"] >= target:
            return {"samples": point["samples"], "bytes": point["bytes"],
                    "bytes_between_groups": point["bytes_between_groups"]}
    return None


def _best(reached: dict, prefix: str) -> str | None:
    """The configuration named ``prefix...`` that reached the target in the fewest bytes."""
    mine = {n: t for n, t in reached.items() if n.startswith(prefix)}
    return min(mine, key=lambda n: (mine[n]["bytes"], mine[n]["samples"])) if mine else None


def factors(to_targets: dict, target: float) -> dict:
    """Bytes (and samples) to the target of the baselines over those of the best EASGD.

    Args:
        to_targets: configuration -> its ``to_target`` (None: not reached; ``"error"``: the
            run failed).
    """
    reached = {n: t for n, t in to_targets.items() if isinstance(t, dict)}
    out: dict = {"target": target}
    for label, prefix in (("easgd", "easgd_tau"), ("easgd_g1", "easgd_g1_tau")):
        best = _best(reached, prefix)
        if best is None:
            if any(n.startswith(prefix) for n in to_targets):
                out[f"{label}_best"] = None
                out[f"{label}_note"] = f"no {prefix}* configuration reached the target"
            continue
        out[f"{label}_best"] = best
        mine = reached[best]
        for baseline in ("dist_sync", "dist_sync_hier", "async_sgd", *[n for n in to_targets
                                                     if n.startswith("local_sgd")]):
            if baseline not in to_targets:
                continue
            base = to_targets[baseline]
            if not isinstance(base, dict):
                out[f"{label}_vs_{baseline}"] = ("the baseline run failed" if base == "error"
                                                 else "the baseline did not reach the target")
                continue
            entry = {"bytes_factor": round(base["bytes"] / mine["bytes"], 3),
                     "samples_factor": round(base["samples"] / mine["samples"], 3)}
            if label == "easgd":
                entry["bytes_between_groups_factor"] = round(
                    base["bytes_between_groups"] / mine["bytes_between_groups"], 3)
            out[f"{label}_vs_{baseline}"] = entry
    return out


def plot(results: dict, targets: list[float], path: str, title: str) -> None:
    """Accuracy against samples (left) and against bytes, log x (right), from 0.8 up (where
    the targets lie; what falls below leaves the panel); EASGD solid, the baselines dashed; a
    dot where a configuration first reached the first target. The dotted lines
    of the right panel are EASGD's bytes between the groups and the server alone, and
    ``dist_sync_hier``'s between the nodes (its leaders' allreduce)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    colours = plt.get_cmap("tab10").colors
    for index, (name, r) in enumerate(results.items()):
        if "curve" not in r:
            continue
        colour = colours[index % len(colours)]
        style = "-" if name.startswith("easgd") else "--"
        curve = r["curve"]
        left.plot([p["samples"] for p in curve], [p["accuracy"] for p in curve], style,
                  color=colour, label=name, linewidth=1.4)
        trained = [p for p in curve if p["samples"] > 0]  # (log x: no point at 0 bytes)
        right.plot([p["bytes"] for p in trained], [p["accuracy"] for p in trained], style,
                   color=colour, label=name, linewidth=1.4)
        if name.startswith("easgd_tau") or name == "dist_sync_hier":
            between = "nodes" if name == "dist_sync_hier" else "groups"
            right.plot([p["bytes_between_groups"] for p in trained],
                       [p["accuracy"] for p in trained], ":", color=colour, linewidth=1.0,
                       label=f"{name} (between {between})")
        reached = to_target(curve, targets[0])
        if reached is not None:
            left.plot([reached["samples"]], [targets[0]], "o", color=colour, markersize=5)
            right.plot([reached["bytes"]], [targets[0]], "o", color=colour, markersize=5)
    for ax, label in ((left, "samples processed (sum over the 4 workers)"),
                      (right, "bytes communicated (sum over the 4 workers of kv.traffic "
                              "sent + received)")):
        for level in targets:
            ax.axhline(level, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlabel(label)
        ax.set_ylabel("test accuracy of the exported model")
        ax.set_ylim(0.8, 1.0)
        ax.grid(alpha=0.3)
    right.set_xscale("log")
    left.legend(fontsize=8, loc="lower right")
    right.legend(fontsize=7, loc="lower left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_all(configs: list[dict], shared: dict, timeout: float) -> dict:
    """Every configuration once: name -> result (its curve, or ``error``)."""
    return {config["name"]: run_config(dict(config, **shared), timeout) for config in configs}


def _targets(results: dict, target: float) -> dict:
    """name -> ``to_target`` of its curve (``"error"``: the run failed)."""
    return {n: to_target(r["curve"], target) if "curve" in r else "error"
            for n, r in results.items()}


def _median_target(runs: list) -> dict | str | None:
    """The median over repeats of each of samples, bytes and bytes between groups to the
    target (a run that did not reach it counts as infinitely many: None when they are the
    median); ``"error"`` if every run failed."""
    finished = [t for t in runs if t != "error"]
    if not finished:
        return "error"
    out = {}
    for key in ("samples", "bytes", "bytes_between_groups"):
        value = statistics.median([t[key] if isinstance(t, dict) else math.inf
                                   for t in finished])
        if math.isinf(value):
            return None
        out[key] = int(value)
    return out


def combine(repeats: list[dict], targets: list[float]) -> dict:
    """One learning rate's repeats: the first repeat's curves and summary; ``to_target`` the
    median over the repeats for the first target (their own in ``to_target_runs``), and with
    several targets ``to_targets`` (target -> median) and ``to_targets_runs``."""
    combined = {}
    for name, first in repeats[0].items():
        result = dict(first)
        medians, per_run = {}, {}
        for target in targets:
            runs = [_targets(r, target)[name] for r in repeats]
            median = _median_target(runs)
            medians[str(target)] = None if median == "error" else median
            per_run[str(target)] = runs
        if "curve" in result or len(repeats) > 1:
            result["to_target"] = medians[str(targets[0])]
        if len(repeats) > 1:
            result["to_target_runs"] = per_run[str(targets[0])]
            result["final_accuracy_runs"] = [r[name].get("final_accuracy") for r in repeats]
        if len(targets) > 1:
            result["to_targets"] = medians
            if len(repeats) > 1:
                result["to_targets_runs"] = per_run
        combined[name] = result
    return combined


def _medians(results: dict, target: float) -> dict:
    """name -> the combined ``to_target`` (median over repeats) for ``target``."""
    out = {}
    for name, r in results.items():
        if "to_targets" in r:
            out[name] = r["to_targets"][str(target)]
        elif "to_target" in r:
            out[name] = r["to_target"]
        else:
            out[name] = "error"
    return out


def at_best_lr(sweep: dict, target: float) -> tuple[dict, dict]:
    """Each configuration at the rate that got it to ``target`` in the fewest bytes (then
    samples): (name -> rate, name -> its ``to_target``)."""
    names = next(iter(sweep.values()))
    best_lr, best = {}, {}
    for name in names:
        options = [(t["bytes"], t["samples"], lr) for lr, r in sweep.items()
                   for t in [_medians(r, target)[name]] if isinstance(t, dict)]
        best_lr[name] = min(options)[2] if options else None
        best[name] = _medians(sweep[best_lr[name]], target)[name] if options else None
    return best_lr, best


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--model", default="mlp", choices=["mlp", "lenet"])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16, help="per worker")
    parser.add_argument("--lr", type=float, nargs="+", default=[0.05],
                        help="learning rate(s); with several, every configuration runs at "
                             "each (a sweep): the curves and the plot are the first one's, "
                             "and the factors are also given with each configuration at the "
                             "rate that got it to the target in the fewest bytes")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the initial weights and every worker's batch order")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run everything with seeds seed, seed+1 ...; to_target and the "
                             "factors are then medians over the repeats (the curves and the "
                             "plot are the first repeat's)")
    parser.add_argument("--easgd-taus", type=int, nargs="*", default=[1, 4, 16])
    parser.add_argument("--easgd-g1-taus", type=int, nargs="*", default=[4, 16],
                        help="EASGD with groups of one worker (no group allreduce) at these "
                             "taus (none: leave them out)")
    parser.add_argument("--local-tau", type=int, default=4, help="0: no local SGD")
    parser.add_argument("--target", type=float, nargs="+", default=[0.95],
                        help="test accuracy to reach; with several, every figure is also "
                             "given for each (the first is the plot's and the top level's)")
    parser.add_argument("--eval-every", type=int, default=256,
                        help="samples (summed over workers) between evaluations")
    parser.add_argument("--plot", metavar="PATH")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 epoch of dist_sync, EASGD tau 16 (groups of 2) and "
                             "EASGD tau 16 (groups of 1)")
    parser.add_argument("--timeout", type=float, default=600, help="per configuration")
    parser.add_argument("--worker", nargs=2, metavar=("CONFIG", "OUT_DIR"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker[0]), args.worker[1])
        return
    sys.path.insert(0, REPO)
    configs = configurations(args.easgd_taus, args.local_tau, args.easgd_g1_taus)
    if args.quick:
        args.epochs, args.lr = 1, args.lr[:1]
        configs = [c for c in configurations([16], 0, [16]) if c["name"] != "async_sgd"]
    started = time.perf_counter()
    targets = args.target
    sweep, failed = {}, False
    for lr in args.lr:
        repeats = []
        for repeat in range(args.repeats):
            shared = {"model": args.model, "epochs": args.epochs, "batch": args.batch,
                      "lr": lr, "seed": args.seed + repeat, "eval_every": args.eval_every}
            repeats.append(run_all(configs, shared, args.timeout))
            failed = failed or any("error" in r for r in repeats[-1].values())
        sweep[lr] = combine(repeats, targets)
    results = sweep[args.lr[0]]
    report = {"benchmark": "convergence", "model": args.model,
              "data": "sklearn digits (1438 train / 359 test)", "workers": WORKERS,
              "easgd_group_size": EASGD_GROUP, "batch_per_worker": args.batch,
              "epochs": args.epochs,
              "optimizer": {"name": "sgd", "learning_rate": args.lr[0], "momentum": 0.9,
                            "schedule": "constant, the same for every configuration"},
              "eval_every_samples": args.eval_every, "target_accuracy": targets[0],
              "seeds": list(range(args.seed, args.seed + args.repeats)),
              "quick": args.quick, "cpu_count": os.cpu_count(),
              "load_average": [round(v, 2) for v in os.getloadavg()],
              "factors": factors(_medians(results, targets[0]), targets[0]), "configs": results}
    if len(targets) > 1:
        report["targets"] = targets
        report["factors_by_target"] = {str(t): factors(_medians(results, t), t)
                                       for t in targets}
    if len(args.lr) > 1:
        report["sweep"] = {str(lr): {"to_target": _medians(r, targets[0]), "final_accuracy": {
            n: c.get("final_accuracy") for n, c in r.items()},
            "factors": factors(_medians(r, targets[0]), targets[0])}
            for lr, r in sweep.items()}
        for target in targets:
            best_lr, best = at_best_lr(sweep, target)
            if target == targets[0]:
                report["best_lr"] = best_lr
                report["factors_at_best_lr"] = factors(best, target)
            if len(targets) > 1:
                report.setdefault("at_best_lr_by_target", {})[str(target)] = {
                    "best_lr": best_lr, "to_target": best, "factors": factors(best, target)}
    report["seconds"] = round(time.perf_counter() - started, 1)
    if args.plot:
        plot(results, targets, args.plot,
             f"{args.model} on digits, {WORKERS} workers, batch {args.batch}/worker, SGD lr "
             f"{args.lr[0]} momentum 0.9; EASGD: {WORKERS // EASGD_GROUP} groups of "
             f"{EASGD_GROUP} + 1 server (g1: 4 groups of 1); dist_sync_hier: nodes of "
             f"{EASGD_GROUP}")
        report["plot"] = os.path.abspath(args.plot)
    print(json.dumps(report), flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
