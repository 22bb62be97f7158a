"""``fit``: the Module-style training loop over Gluon blocks (MXNet's ``Module.fit``).

One call trains a network for some epochs with a progress bar (tqdm), logs one line per epoch,
evaluates on validation data, stops early when a monitored value stops improving, and writes a
checkpoint every N epochs (and optionally every N steps). With ``resume=True`` it continues
from the newest good checkpoint in ``checkpoint_dir``: parameters, optimizer states and update
counters, the random generator, the data loader's position in its shuffled order, the history
and the early-stopping state are restored, so the resumed run ends with the same parameters,
bit for bit, as a run that was never interrupted. With a store that trains one replica per
worker group (``dist_async`` with EASGD or local SGD) every worker takes part in a checkpoint:
its parameters are the store's centre (the model that is exported) and its optimizer states
are every group's replica, optimizer states and step counters (and EASGD's pending answers), so
such runs resume exactly too. A checkpoint folder belongs to one run
(``portable.checkpoint``): without ``resume`` a folder holding another run's checkpoints is
refused, unless ``fresh=True`` deletes them.

Example:
    >>> import portable as pt
    >>> from portable.data import ArrayDataset, DataLoader
    >>> from portable.data.vision import load_arrays
    >>> from portable.models.zoo import get_model
    >>> split = load_arrays("digits")
    >>> net = get_model("mlp"); net.initialize(pt.init.Xavier())
    >>> train = DataLoader(ArrayDataset(split.x_train, split.y_train), 32, shuffle=True)
    >>> result = fit(net, train, epochs=2, optimizer="adam", progress=False)
    >>> result["epochs"], result["steps"]
    (2, 90)
"""
from __future__ import annotations

import logging
import math
import os
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

from portable.errors import PortableError
from portable.fit_state import (Run, checkpoint_tensors, collective_states, restore,
                                training_manifest)

log = logging.getLogger("portable.fit")


class Callback:
    """Hooks called by ``fit``; override the ones you need. A plain function given in
    ``callbacks`` is called as ``on_epoch_end``."""

    def on_train_begin(self, state: dict) -> None:
        pass

    def on_batch_end(self, state: dict) -> None:
        pass

    def on_epoch_end(self, record: dict) -> None:
        pass

    def on_train_end(self, result: dict) -> None:
        pass


class _FunctionCallback(Callback):
    def __init__(self, fn: Callable[[dict], Any]) -> None:
        self.fn = fn

    def on_epoch_end(self, record: dict) -> None:
        self.fn(record)


def _agreed(trainer: Any, decision: bool) -> bool:
    """Rank 0's decision on every worker of a distributed store. Each worker judges its own
    record (its shard of the validation data; under EASGD or local SGD its own replica), and a
    worker that stopped alone would leave the others waiting for it in their next collective."""
    store = trainer.kvstore
    if store is None or getattr(store, "num_workers", 1) <= 1:
        return decision
    return store.broadcast_bytes(b"\x01" if decision else b"\x00") == b"\x01"


class EarlyStopping:
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs. With a
    distributed store, every worker stops when rank 0's record says so.

    Args:
        monitor: a key of the epoch record (``val_accuracy``, ``val_loss``, ``train_loss``).
        patience: epochs without improvement before stopping.
        mode: ``max``, ``min``, or ``auto`` (``max`` for accuracies, else ``min``).
        min_delta: the smallest change that counts as an improvement.
    """

    def __init__(self, monitor: str = "val_loss", patience: int = 5, mode: str = "auto",
                 min_delta: float = 0.0) -> None:
        if mode == "auto":
            mode = "max" if "acc" in monitor else "min"
        if mode not in ("max", "min"):
            raise PortableError(f"EarlyStopping mode must be max, min or auto, got {mode!r}")
        self.monitor, self.patience, self.mode, self.min_delta = monitor, patience, mode, min_delta
        self.best: float | None = None
        self.wait = 0

    def update(self, record: dict) -> bool:
        """Take one epoch's record; True when training should stop."""
        if self.monitor not in record:
            raise PortableError(f"EarlyStopping monitors {self.monitor!r}, but the epoch "
                                f"record has only {sorted(record)}")
        value = float(record[self.monitor])
        better = (self.best is None or
                  (value > self.best + self.min_delta if self.mode == "max"
                   else value < self.best - self.min_delta))
        if better:
            self.best, self.wait = value, 0
        else:
            self.wait += 1
        return self.wait >= self.patience

    def state_dict(self) -> dict:
        return {"best": self.best, "wait": self.wait}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.wait = state["best"], int(state["wait"])


def _unpack(batch: Any) -> tuple[Any, Any]:
    if not isinstance(batch, (list, tuple)) or len(batch) < 2:
        raise PortableError("fit expects batches of (data, label)")
    return batch[0], batch[1]


def _to(array: Any, device: Any) -> Any:
    from portable.ndarray import NDArray, array as nd_array

    if not isinstance(array, NDArray):
        array = nd_array(np.asarray(array))
    return array if device is None else array.as_in_context(device)


def _metric_record(prefix: str, metric: Any) -> dict:
    return {f"{prefix}_{name}": float(value) for name, value in metric.get_name_value()}


def evaluate(net: Any, data: Any, metrics: Any = "acc", loss: Any = None,
             device: Any = None) -> dict:
    """Metrics (and the mean loss) of ``net`` over ``data`` in inference mode.

    Returns:
        ``{metric name: value, ..., "loss": mean loss}`` (the loss when ``loss`` is given).
    """
    from portable import metric as metric_mod

    metric = metric_mod.create(metrics)
    metric.reset()
    total, count = 0.0, 0
    for batch in data:
        x, y = _unpack(batch)
        x, y = _to(x, device), _to(y, device)
        out = net(x)
        metric.update([y], [out])
        if loss is not None:
            values = loss(out, y).asnumpy()
            total += float(values.sum())
            count += values.size
    result = dict(metric.get_name_value())
    if loss is not None:
        result["loss"] = total / max(count, 1)
    return result


def fit(net: Any, train_data: Any, val_data: Any = None, loss: Any = None,
        trainer: Any = None, optimizer: Any = "sgd", optimizer_params: dict | None = None,
        epochs: int = 10, metrics: Any = "acc", device: Any = None,
        callbacks: Sequence[Any] = (), checkpoint_dir: Any = None, checkpoint_every: int = 1,
        checkpoint_steps: int = 0, keep_checkpoints: int = 3, resume: bool = False,
        fresh: bool = False, early_stopping: EarlyStopping | None = None, progress: bool = True,
        architecture: dict | None = None) -> dict:
    """Train ``net`` on ``train_data`` (batches of ``(data, label)``).

    Args:
        net: an initialised Block (deferred initialisation is fine).
        train_data: an iterable of batches; a DataLoader also makes resume exact.
        val_data: evaluated after every epoch (``val_*`` entries of the record).
        loss: a Gluon loss (default ``SoftmaxCrossEntropyLoss``).
        trainer: a ``gluon.Trainer`` (default: one over ``net.collect_params()`` with
            ``optimizer`` and ``optimizer_params``).
        epochs: the total number of epochs (a resumed run counts the ones already done).
        metrics: training/validation metrics (names, EvalMetrics or a list).
        device: where batches are copied before the forward pass.
        callbacks: Callback objects or functions of the epoch record.
        checkpoint_dir: where checkpoints go (None: none are written).
        checkpoint_every: write one every this many epochs (and after the last).
        checkpoint_steps: also write one every this many steps, mid-epoch (0: never).
        keep_checkpoints: how many of the newest checkpoints to keep.
        resume: continue from the newest good checkpoint in ``checkpoint_dir``, as the same
            run (its run id); with none there, start a new run.
        fresh: start a new run even when ``checkpoint_dir`` holds another run's checkpoints,
            deleting them first (without ``resume`` or ``fresh``, such a folder is refused).
        early_stopping: an EarlyStopping rule (None: train all epochs).
        progress: show a tqdm progress bar on stderr (in data-parallel training, on rank 0
            only: the ranks' bars would overwrite each other on one terminal).
        architecture: JSON description of the model, stored in the manifests.

    Returns:
        ``{"history", "epochs", "steps", "stopped_early", "checkpoint", "resumed_from",
        "refused_checkpoints", "run_id", "seconds"}`` (``run_id``: the run's id, None without
        ``checkpoint_dir``).

    Raises:
        SerializationError: ``checkpoint_dir`` holds another run's checkpoints and neither
            ``resume`` nor ``fresh`` is given (the message names the folder and the run), or
            ``resume`` finds checkpoints but none of the run loads.
    """
    from portable import autograd, metric as metric_mod
    from portable.engine import get_engine
    from portable.gluon import Trainer
    from portable.gluon.loss import SoftmaxCrossEntropyLoss

    if resume and fresh:
        raise PortableError("fit: resume=True continues the run in checkpoint_dir and "
                            "fresh=True deletes it; pass one of them")
    if (resume or fresh) and checkpoint_dir is None:
        raise PortableError(f"fit({'resume' if resume else 'fresh'}=True) needs checkpoint_dir")
    loss_fn = loss if loss is not None else SoftmaxCrossEntropyLoss()
    if trainer is None:
        trainer = Trainer(net.collect_params(), optimizer, optimizer_params)
    train_metric = metric_mod.create(metrics)
    hooks = [cb if isinstance(cb, Callback) else _FunctionCallback(cb) for cb in callbacks]
    manager = None
    if checkpoint_dir is not None:
        from portable.checkpoint import CheckpointManager

        manager = CheckpointManager(checkpoint_dir, keep=keep_checkpoints)
    run = Run()
    result = {"resumed_from": None, "refused_checkpoints": [], "checkpoint": None}
    if resume:
        restore(manager, net, trainer, train_data, early_stopping, run, result, train_metric)
    elif manager is not None and getattr(trainer, "rank", 0) == 0:
        # Refuses another run's folder before any work is done. Only the writer claims it:
        # another worker could otherwise see the writer's first checkpoint as another run's.
        manager.start(fresh=fresh)
    result["run_id"] = manager.run_id if manager is not None else None

    def save() -> None:
        store = getattr(trainer, "kvstore", None)
        writer = store is None or store.rank == 0
        if manager is None or not (writer or collective_states(trainer)):
            return  # in data-parallel training rank 0 writes; every rank resumes from it
        get_engine().wait_all()  # every pushed update and random draw has landed
        # (every worker takes part with a replica store: its states and centre are collective)
        params, states = checkpoint_tensors(net, trainer)
        if not writer:
            return
        manifest = training_manifest(run, net, train_data, train_metric, early_stopping,
                                     architecture)
        result["checkpoint"] = str(manager.save(params, states, manifest))

    for hook in hooks:
        hook.on_train_begin({"epoch": run.epoch, "step": run.step})
    start = time.perf_counter()
    stopped = False
    while run.epoch < epochs and not stopped:
        epoch_start = time.perf_counter()
        if not run.loss_count:
            train_metric.reset()
        bar = _progress(train_data, run, epochs, progress and _draws_progress(trainer))
        for batch in train_data:
            x, y = _unpack(batch)
            x, y = _to(x, device), _to(y, device)
            with autograd.record():
                out = net(x)
                losses = loss_fn(out, y)
            losses.backward()
            trainer.step(x.shape[0])
            run.step += 1
            train_metric.update([y], [out])
            values = losses.asnumpy()
            run.loss_sum += float(values.sum())
            run.loss_count += values.size
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{run.loss_sum / run.loss_count:.4f}", refresh=False)
            for hook in hooks:
                hook.on_batch_end({"epoch": run.epoch + 1, "step": run.step})
            if checkpoint_steps and run.step % checkpoint_steps == 0:
                save()
        if bar is not None:
            bar.close()
        run.epoch += 1
        record = {"epoch": run.epoch, "step": run.step,
                  "train_loss": run.loss_sum / max(run.loss_count, 1),
                  **_metric_record("train", train_metric),
                  "learning_rate": float(trainer.learning_rate)}
        run.loss_sum, run.loss_count = 0.0, 0
        train_metric.reset()
        if val_data is not None:
            scores = evaluate(net, val_data, metrics, loss_fn, device)
            record.update({f"val_{k}": float(v) for k, v in scores.items()})
        record["seconds"] = time.perf_counter() - epoch_start
        run.history.append(record)
        _log_epoch(record, epochs)
        for hook in hooks:
            hook.on_epoch_end(record)
        if early_stopping is not None and _agreed(trainer, early_stopping.update(record)):
            stopped = True
            log.info("early stopping after epoch %d: %s did not improve for %d epochs",
                     run.epoch, early_stopping.monitor, early_stopping.patience)
        if run.epoch % max(checkpoint_every, 1) == 0 or run.epoch == epochs or stopped:
            save()
    get_engine().wait_all()
    result.update({"history": run.history, "epochs": run.epoch, "steps": run.step,
                   "stopped_early": stopped, "seconds": time.perf_counter() - start})
    for hook in hooks:
        hook.on_train_end(result)
    return result


#: Where MPI launchers put the world rank (Open MPI, MPICH/Hydra and Intel MPI, Slurm).
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


def _draws_progress(trainer: Any) -> bool:
    """Whether this process draws the progress bar: not when the trainer's store says a
    non-zero rank, nor when the MPI launcher does. The second covers a trainer given a store's
    name, which knows no rank until its first step creates the store; for the dist stores the
    two are the same number. Non-zero ranks still log their epoch lines."""
    if getattr(trainer, "rank", 0) != 0:
        return False
    for name in RANK_VARS:
        value = os.environ.get(name, "").strip()
        if value:
            return value == "0"
    return True


def _progress(train_data: Any, run: Run, epochs: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    try:
        total = len(train_data)
    except TypeError:
        total = None
    done = 0
    if hasattr(train_data, "state_dict"):
        done = int(train_data.state_dict().get("batches_done", 0))
    return tqdm(total=total, initial=done, desc=f"epoch {run.epoch + 1}/{epochs}",
                unit="batch", leave=False, file=sys.stderr, dynamic_ncols=True)


def _log_epoch(record: dict, epochs: int) -> None:
    parts = [f"{k}={v:.4f}" for k, v in record.items()
             if k not in ("epoch", "step", "seconds") and isinstance(v, float)
             and not math.isnan(v)]
    line = (f"epoch {record['epoch']}/{epochs}: " + " ".join(parts)
            + f" ({record['seconds']:.1f} s)")
    log.info(line)
