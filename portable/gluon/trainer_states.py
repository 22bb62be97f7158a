"""What a ``gluon.Trainer`` accepts as optimizer states: the check of an optimizer-states file
(``Updater.get_states``' bytes) against the trainer's parameters, before anything is applied.

The file is a verified tensor file (``portable.io.tensors``: container and digest checked
there); its JSON metadata and its tensors are checked here, field by field, so a damaged or
foreign file fails with a SerializationError naming the file, the key and the parameter, never
with a raw KeyError, TypeError or ValueError, and never half-applied:

- ``format`` is ``portable.optimizer-states``;
- ``counts``: ``num_update`` and every ``index_update_count`` a whole number from 0 to 2**53,
  each index a parameter's (NaN, infinities, fractions and negatives are refused);
- ``entries``: ``[index, [present, ...]]`` once per parameter at most; every tensor an entry
  names exists, and no other; each has the parameter's shape and a dtype of its kind (a float
  parameter's states are floats), and there are as many as the optimizer keeps per parameter;
- ``optimizer`` (the dumped configuration, when it is to be restored): an object whose numbers
  are finite, from which the optimizer can be rebuilt.

A store that trains one replica per worker group (``is_capable("replica_states")``: EASGD,
local SGD) gives a trainer its whole training state instead (``checkpoint_bytes``): a tensor
file of format ``portable.replica-checkpoint`` holding, per group, a tensor file with the
group's replicas, step counters and optimizer states. ``check_replica_states`` checks that
container, and each group's optimizer states as above, on every worker alike (every group's
part, not only its own: the workers then agree on which checkpoint to load); whether the
file fits the store (algorithm, workers, groups, ``tau``, the algorithm's own tensors) the
store checks when it restores, before it changes anything.

Example:
    >>> check_states(trainer.get_states(), "opt.states", trainer)    # doctest: +SKIP
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from portable.errors import PortableError, SerializationError
from portable.io.tensors import tensors_from_bytes
from portable.optim.optimizer import from_config
from portable.optim.updater import STATES_FORMAT

MAX_COUNT = 1 << 53
_MAX_DEPTH = 8  # an optimizer configuration nests a scheduler's, no deeper
_NAME_KEYS = ("name", "warmup_mode")  # the only strings in an optimizer's configuration


def check_states(data: bytes, source: str, params: list, optimizer: Any,
                 restore_optimizer: bool) -> None:
    """Check optimizer-states bytes against ``params`` (the trainer's, in index order).

    Args:
        data: the states file's bytes.
        source: names the file in messages.
        params: the trainer's Parameters; entry ``i`` of the file is ``params[i]``'s.
        optimizer: the trainer's optimizer (used to count state arrays when the file's
            configuration is not restored).
        restore_optimizer: whether the file's dumped configuration will be rebuilt.

    Raises:
        SerializationError: naming ``source``, the key and the parameter at fault.
    """
    tensors, meta = tensors_from_bytes(data, source)
    where = f"optimizer states {source}"
    if not isinstance(meta, dict):
        raise SerializationError(f"{where}: the metadata is not a JSON object")
    if meta.get("format") != STATES_FORMAT:
        raise SerializationError(f"{where}: not an optimizer-states file (key 'format' is "
                                 f"{meta.get('format')!r:.80})")
    if restore_optimizer and "optimizer" in meta:
        optimizer = _rebuilt(meta["optimizer"], where)
    elif "optimizer" in meta and not isinstance(meta["optimizer"], dict):
        raise SerializationError(f"{where}: key 'optimizer' is not an object")
    _check_counts(meta.get("counts"), params, where)
    used = _check_entries(meta.get("entries"), tensors, params, optimizer, where)
    extra = sorted(set(tensors) - used)
    if extra:
        raise SerializationError(f"{where}: tensors {extra[:5]} belong to no entry of key "
                                 f"'entries'")


def check_replica_states(data: bytes, source: str, params: list, optimizer: Any,
                         restore_optimizer: bool = True) -> None:
    """Check a replica store's ``checkpoint_bytes`` against ``params`` (the trainer's, in
    index order: key ``i`` is ``params[i]``).

    Args:
        data: the bytes.
        source: names the file in messages.
        params: the trainer's Parameters.
        optimizer: the trainer's optimizer.
        restore_optimizer: whether the trainer takes the saved configuration (the store
            rebuilds it in any case, so it must rebuild; with False the states must also fit
            ``optimizer``, which the trainer then keeps).

    Raises:
        SerializationError: naming ``source``, the group, the key and the parameter at fault.
    """
    from portable.kvstore.replica import CHECKPOINT_FORMAT  # (the store is set up already)

    tensors, meta = tensors_from_bytes(data, source)
    where = f"replica checkpoint {source}"
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise SerializationError(f"{where}: not a replica checkpoint (key 'format' is "
                                 f"{found!r:.80}, expected {CHECKPOINT_FORMAT!r}); was it "
                                 f"saved with another kvstore?")
    keys = meta.get("keys")
    if not isinstance(keys, list) or len(keys) != len(params):
        raise SerializationError(f"{where}: key 'keys' is not a list of this trainer's "
                                 f"{len(params)} parameters")
    for index, entry in enumerate(keys):
        if not (isinstance(entry, list) and len(entry) == 3 and entry[0] == index
                and isinstance(entry[1], list) and isinstance(entry[2], str)):
            raise SerializationError(f"{where}: key 'keys', item {index} is {entry!r:.80}, not "
                                     f"[{index}, shape, dtype]")
    groups = _count(meta.get("groups"), f"{where}: key 'groups'")
    if groups < 1:
        raise SerializationError(f"{where}: key 'groups' is 0")
    for group in range(groups):
        blob = tensors.get(f"group{group}")
        if blob is None or blob.dtype != np.uint8 or blob.ndim != 1:
            raise SerializationError(f"{where}: group {group} is missing")
        _check_group(blob.tobytes(), f"{source} (group {group})", params, optimizer,
                     restore_optimizer)


def _check_group(data: bytes, source: str, params: list, optimizer: Any,
                 restore_optimizer: bool) -> None:
    part, meta = tensors_from_bytes(data, source)
    where = f"replica checkpoint {source}"
    steps = meta.get("steps") if isinstance(meta, dict) else None
    if not isinstance(steps, list) or len(steps) != len(params):
        raise SerializationError(f"{where}: key 'steps' is not one count per parameter")
    for index, value in enumerate(steps):
        _count(value, f"{where}: key 'steps', parameter {_name(params, index)}")
    for index, param in enumerate(params):
        weight = part.get(f"weight/{index}")
        label = f"{where}: the replica of parameter {_name(params, index)}"
        if weight is None:
            raise SerializationError(f"{label} is missing")
        _check_array(weight, param, label)
    states = part.get("states")
    if states is None or states.dtype != np.uint8 or states.ndim != 1:
        raise SerializationError(f"{where}: the optimizer states are missing")
    check_states(states.tobytes(), source, params, optimizer, restore_optimizer=True)
    if not restore_optimizer:
        check_states(states.tobytes(), source, params, optimizer, restore_optimizer=False)


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise SerializationError(f"{what} is {value!r:.80}, not a whole number from 0 to "
                                 f"{MAX_COUNT}")
    return value


def _index(value: Any, params: list, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < len(params):
        raise SerializationError(f"{what}: index {value!r:.80} is not one of this trainer's "
                                 f"{len(params)} parameters (0 to {len(params) - 1})")
    return value


def _check_counts(counts: Any, params: list, where: str) -> None:
    if not isinstance(counts, dict):
        raise SerializationError(f"{where}: key 'counts' is missing or not an object")
    _count(counts.get("num_update"), f"{where}: key 'counts.num_update'")
    pairs = counts.get("index_update_count")
    if not isinstance(pairs, list):
        raise SerializationError(f"{where}: key 'counts.index_update_count' is missing or not "
                                 f"a list")
    seen = set()
    for pair in pairs:
        what = f"{where}: key 'counts.index_update_count'"
        if not isinstance(pair, list) or len(pair) != 2:
            raise SerializationError(f"{what}: {pair!r:.80} is not an [index, count] pair")
        index = _index(pair[0], params, what)
        if index in seen:
            raise SerializationError(f"{what}: parameter {_name(params, index)} appears twice")
        seen.add(index)
        _count(pair[1], f"{what}: the count of parameter {_name(params, index)}")


def _check_entries(entries: Any, tensors: dict, params: list, optimizer: Any,
                   where: str) -> set:
    """Check every entry and its tensors; returns the tensor names the entries use."""
    if not isinstance(entries, list):
        raise SerializationError(f"{where}: key 'entries' is missing or not a list")
    used, seen = set(), set()
    for position, entry in enumerate(entries):
        what = f"{where}: key 'entries', item {position}"
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list)
                and all(isinstance(flag, bool) for flag in entry[1])):
            raise SerializationError(f"{what} is {entry!r:.80}, not [index, [present, ...]]")
        index = _index(entry[0], params, what)
        if index in seen:
            raise SerializationError(f"{what}: parameter {_name(params, index)} appears twice")
        seen.add(index)
        param, label = params[index], f"{where}: parameter {_name(params, index)}"
        expected = _slots_present(optimizer, index, param)
        if expected is not None and expected != entry[1]:
            raise SerializationError(f"{label}: the file keeps {sum(entry[1])} state array(s) "
                                     f"({entry[1]}), the optimizer {type(optimizer).__name__} "
                                     f"{sum(expected)} ({expected})")
        for slot, present in enumerate(entry[1]):
            if not present:
                continue
            name = f"{position}/{slot}"
            if name not in tensors:
                raise SerializationError(f"{label}: state array {slot} (tensor {name!r}) is "
                                         f"missing")
            _check_array(tensors[name], param, f"{label}: state array {slot}")
            used.add(name)
    return used


def _check_array(array: np.ndarray, param: Any, what: str) -> None:
    shape = getattr(param, "shape", None)
    if shape is not None and (len(shape) != array.ndim or any(
            d > 0 and d != s for d, s in zip(shape, array.shape))):
        raise SerializationError(f"{what} has shape {list(array.shape)}, the parameter "
                                 f"{list(shape)}")
    dtype = np.dtype(getattr(param, "dtype", np.float32))
    if array.dtype.kind != dtype.kind:
        raise SerializationError(f"{what} has dtype {array.dtype}, which does not fit the "
                                 f"parameter's {dtype}")


def _slots_present(optimizer: Any, index: int, param: Any) -> list[bool] | None:
    """Which state arrays ``optimizer`` keeps for ``param`` (None: unknown before the
    parameter is initialised)."""
    try:
        weight = param.list_data()[0]
    except PortableError:  # not initialised yet (deferred)
        return None
    state = optimizer.create_state(index, weight)
    slots = [] if state is None else list(state) if isinstance(state, (list, tuple)) \
        else [state]
    return [slot is not None for slot in slots]


def _rebuilt(config: Any, where: str) -> Any:
    """The optimizer a dumped configuration rebuilds (checked: finite numbers, strings only
    where names go, accepted arguments, a learning rate that evaluates)."""
    if not isinstance(config, dict) or not isinstance(config.get("name"), str):
        raise SerializationError(f"{where}: key 'optimizer' is not an optimizer configuration "
                                 f"(an object with a 'name')")
    _check_leaves(config, f"{where}: key 'optimizer'", 0)
    try:
        optimizer = from_config(config)
        scheduler = optimizer.lr_scheduler
        for number in (0, 1, 1 << 20):  # the schedule evaluates to numbers
            rate = float(scheduler(number)) if scheduler is not None else optimizer.lr
            if not math.isfinite(rate):
                raise ValueError(f"learning rate {rate} at update {number}")
    except (PortableError, TypeError, ValueError, KeyError, AttributeError,
            OverflowError) as exc:
        raise SerializationError(f"{where}: key 'optimizer' does not rebuild an optimizer: "
                                 f"{type(exc).__name__}: {str(exc)[:200]}") from None
    return optimizer


def _check_leaves(value: Any, what: str, depth: int, key: str = "") -> None:
    """Numbers finite; strings only under the keys that hold names (the hyper-parameters are
    numbers and booleans)."""
    if depth > _MAX_DEPTH:
        raise SerializationError(f"{what} nests deeper than an optimizer configuration does")
    if isinstance(value, dict):
        for name, item in value.items():
            _check_leaves(item, f"{what}.{name}", depth + 1, name)
    elif isinstance(value, list):
        for item in value:
            _check_leaves(item, what, depth + 1, key)
    elif isinstance(value, float) and not math.isfinite(value):
        raise SerializationError(f"{what} is {value}, not a finite number")
    elif isinstance(value, str) and key not in _NAME_KEYS:
        raise SerializationError(f"{what} is the string {value!r:.40}, not a number")


def _name(params: list, index: int) -> str:
    return f"{getattr(params[index], 'name', index)!r} (index {index})"
