"""What ``fit`` keeps in a checkpoint besides the tensors, and how a resumed run gets it back.

A checkpoint's manifest holds the training state: ``epoch`` and ``step``, the random
generator (``rng``), the data loader's place in its shuffled order (``data``), the per-epoch
``history``, the current epoch's running sums (``partial``) and the early-stopping state. A
resumed run checks all of it, and the optimizer states against its trainer, before it restores
anything (``check_training_state``): a field missing, of the wrong type or out of range is a
SerializationError naming the manifest and the key, so ``CheckpointManager.latest`` refuses
that checkpoint and falls back to the previous one instead of failing halfway through a
restore.

With a store that trains one replica per worker group (``Trainer.holds_replica_states``), a
checkpoint is collective (``checkpoint_tensors``): its parameters are the store's centre, its
states the store's whole training state, and ``restore`` sets the store up and puts each
worker's replica back into its parameters (``Trainer.set_states``).

Example:
    >>> checkpoint = manager.resume(check=lambda c: check_training_state(       # doctest: +SKIP
    ...     c, train_data, train_metric, trainer))
"""
from __future__ import annotations

import logging
from typing import Any

from portable import random
from portable.checkpoint_manifest import count
from portable.errors import PortableError, SerializationError

log = logging.getLogger("portable.fit")

# What restoring a generator or loader state raises when the state is malformed.
_STATE_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError,
                 PortableError)


class Run:
    """The mutable state of one ``fit`` call (what a checkpoint captures)."""

    def __init__(self) -> None:
        self.epoch = 0          # completed epochs
        self.step = 0           # optimizer steps taken
        self.history: list[dict] = []
        self.loss_sum = 0.0     # the current epoch's running sums (restored mid-epoch)
        self.loss_count = 0


def params_by_name(net: Any) -> dict:
    """Parameters under structural names (``0.weight``): stable across processes."""
    getter = getattr(net, "_collect_params_with_prefix", None)
    return dict(getter()) if getter is not None else dict(net.collect_params().items())


def collective_states(trainer: Any) -> bool:
    """Whether taking ``trainer``'s states is collective (a store training one replica per
    worker group: every worker must take part in a checkpoint, not only the writer)."""
    return bool(getattr(trainer, "holds_replica_states", False))


def checkpoint_tensors(net: Any, trainer: Any) -> tuple[dict, bytes | None]:
    """The parameters and optimizer states a checkpoint holds (call it with the engine
    drained). Collective with a replica store: every worker calls it; rank 0 gets the states
    (the others None), and the parameters are the store's centre (EASGD's centre, local SGD's
    average: the model that is exported), not this worker's replica; parameters the store does
    not train (``grad_req='null'``) are this worker's own."""
    params = params_by_name(net)
    if not collective_states(trainer):
        return {name: p.data().asnumpy() for name, p in params.items()}, trainer.get_states()
    states = trainer.get_states()  # (first: it settles EASGD's answers in flight)
    centre = trainer.get_center()
    return ({name: centre[p] if p in centre else p.data().asnumpy()
             for name, p in params.items()}, states)


def metric_parts(metric: Any) -> list:
    return list(getattr(metric, "metrics", [metric]))


def training_manifest(run: Run, net: Any, train_data: Any, train_metric: Any,
                      early_stopping: Any, architecture: dict | None) -> dict:
    """The JSON part of a checkpoint of ``run`` (the manager adds the files and run id)."""
    return {"epoch": run.epoch, "step": run.step,
            "architecture": architecture or {"class": type(net).__name__},
            "rng": random.get_state(),
            "data": train_data.state_dict() if hasattr(train_data, "state_dict") else None,
            "metrics": run.history[-1] if run.history else {}, "history": run.history,
            "partial": {"loss_sum": run.loss_sum, "loss_count": run.loss_count,
                        "metric_sums": [[m.sum_metric, m.num_inst]
                                        for m in metric_parts(train_metric)]},
            "early_stopping": early_stopping.state_dict() if early_stopping else None}


def check_training_state(checkpoint: Any, train_data: Any, train_metric: Any,
                         trainer: Any) -> None:
    """Check everything ``restore`` will take from ``checkpoint`` (nothing is changed).

    Raises:
        SerializationError: naming the manifest and the key (or the optimizer-states file and
            the parameter) at fault.
    """
    manifest, where = checkpoint.manifest, f"checkpoint manifest {checkpoint.path}"
    epoch = checkpoint.epoch
    _trial(random.get_state, random.set_state, _field(manifest, "rng", dict, where),
           f"{where}: key 'rng'")
    if "data" not in manifest:  # (null when the training data keeps no position)
        raise SerializationError(f"{where}: key 'data' is missing")
    data = manifest["data"]
    if data is not None and hasattr(train_data, "load_state_dict"):
        if not isinstance(data, dict):
            raise SerializationError(f"{where}: key 'data' is not an object")
        done = count(data.get("batches_done"), f"{where}: key 'data.batches_done'")
        if hasattr(train_data, "__len__") and done > len(train_data):
            raise SerializationError(f"{where}: key 'data.batches_done' is {done}, more than "
                                     f"the {len(train_data)} batches of an epoch")
        _trial(train_data.state_dict, train_data.load_state_dict, data, f"{where}: key 'data'")
    history = _field(manifest, "history", list, where)
    if len(history) != epoch:
        raise SerializationError(f"{where}: key 'history' holds {len(history)} epoch records "
                                 f"for {epoch} completed epochs")
    for number, record in enumerate(history, 1):
        if not isinstance(record, dict) or record.get("epoch") != number or not all(
                isinstance(k, str) and _is_number(v) for k, v in record.items()):
            raise SerializationError(f"{where}: key 'history', epoch {number}: not an object "
                                     f"of numbers with 'epoch': {number}")
    _check_partial(_field(manifest, "partial", dict, where), train_metric, where)
    stopping = manifest.get("early_stopping")
    if stopping is not None:
        if not isinstance(stopping, dict) or not (stopping.get("best") is None
                                                  or _is_number(stopping.get("best"))):
            raise SerializationError(f"{where}: key 'early_stopping' is not "
                                     f"{{'best': number or null, 'wait': count}}")
        count(stopping.get("wait"), f"{where}: key 'early_stopping.wait'")
    check = getattr(trainer, "check_states", None)
    if check is not None:  # states and counters only: the caller's trainer keeps its settings
        check(checkpoint.states, f"{checkpoint.path} (optimizer states)",
              restore_optimizer=False)


def _check_partial(partial: dict, train_metric: Any, where: str) -> None:
    if not _is_number(partial.get("loss_sum")):
        raise SerializationError(f"{where}: key 'partial.loss_sum' is not a number")
    loss_count = count(partial.get("loss_count"), f"{where}: key 'partial.loss_count'")
    sums = partial.get("metric_sums")
    if not isinstance(sums, list) or not all(
            isinstance(pair, list) and len(pair) == 2 and _is_number(pair[0])
            and not isinstance(pair[1], bool) and isinstance(pair[1], int) and pair[1] >= 0
            for pair in sums):
        raise SerializationError(f"{where}: key 'partial.metric_sums' is not a list of "
                                 f"[sum, count] pairs")
    if loss_count and len(sums) != len(metric_parts(train_metric)):
        raise SerializationError(f"{where}: key 'partial.metric_sums' holds {len(sums)} "
                                 f"metrics, this run trains with "
                                 f"{len(metric_parts(train_metric))}")


def restore(manager: Any, net: Any, trainer: Any, train_data: Any, early_stopping: Any,
            run: Run, result: dict, train_metric: Any) -> None:
    """Continue from the newest good checkpoint of ``manager``'s folder (its run), or start
    a new run there when it holds none."""
    from portable.gluon.parameter_dict import load_into

    checkpoint = manager.resume(check=lambda found: check_training_state(
        found, train_data, train_metric, trainer))
    if checkpoint is None:
        log.info("no checkpoint in %s: starting from scratch", manager.directory)
        return
    params = params_by_name(net)
    missing = sorted(set(params) - set(checkpoint.params))
    extra = sorted(set(checkpoint.params) - set(params))
    if missing or extra:
        raise PortableError(f"checkpoint {checkpoint.path} does not fit this model: missing "
                            f"{missing[:5]}, unexpected {extra[:5]}")
    # all checked before any is set; deferred parameters are initialised with their values
    # (a replica store is set up by set_states: its parameters must exist)
    load_into(params, checkpoint.params, str(checkpoint.path), device=None,
              allow_missing=False, ignore_extra=False, cast_dtype=True)
    # states and counters from the checkpoint; hyper-parameters from the caller's trainer
    # (a replica store's: collective; its replicas replace the centre in the parameters)
    trainer.set_states(checkpoint.states, str(checkpoint.path), restore_optimizer=False)
    manifest = checkpoint.manifest
    random.set_state(manifest["rng"])
    if manifest.get("data") is not None and hasattr(train_data, "load_state_dict"):
        train_data.load_state_dict(manifest["data"])
    if early_stopping is not None and manifest.get("early_stopping"):
        early_stopping.load_state_dict(manifest["early_stopping"])
    run.epoch, run.step = checkpoint.epoch, checkpoint.step
    run.history = list(manifest["history"])
    partial = manifest["partial"]
    run.loss_sum, run.loss_count = float(partial["loss_sum"]), partial["loss_count"]
    if run.loss_count:
        for part, (total, seen) in zip(metric_parts(train_metric), partial["metric_sums"]):
            part.sum_metric, part.num_inst = float(total), seen
    result["resumed_from"] = str(checkpoint.path)
    result["refused_checkpoints"] = checkpoint.refused
    log.info("resumed run %s from %s (epoch %d, step %d)", manager.run_id, checkpoint.path,
             run.epoch, run.step)


def _field(manifest: dict, key: str, kind: type, where: str) -> Any:
    value = manifest.get(key)
    if not isinstance(value, kind):
        wanted = "an object" if kind is dict else "a list"
        state = "missing" if key not in manifest else f"not {wanted}"
        raise SerializationError(f"{where}: key {key!r} is {state}")
    return value


def _is_number(value: Any) -> bool:
    # NaN and infinities stay numbers here: a diverged run's losses are, and it may resume;
    # an integer must convert to a float.
    if isinstance(value, bool):
        return False
    return isinstance(value, float) or (isinstance(value, int) and abs(value) <= 1 << 53)


def _trial(get: Any, put: Any, state: Any, what: str) -> None:
    """Check ``state`` by restoring it, then put the current state back."""
    current = get()
    try:
        put(state)
    except _STATE_ERRORS as exc:
        raise SerializationError(f"{what} does not restore: {type(exc).__name__}: "
                                 f"{str(exc)[:200]}") from None
    finally:
        put(current)
