"""``Updater``: the per-index optimizer states of one device, and their (pickle-free) file form.

MXNet's ``get_updater(optimizer)`` returns a callable ``updater(index, grad, weight)`` that
creates each index's state on first use and applies the optimizer. Its ``get_states`` /
``set_states`` serialise the states; here they are a safetensors tensor file (see
``portable.checkpoint``) whose JSON metadata holds the optimizer's configuration, its update
counters and the structure of every state.

Example:
    >>> import portable as pt
    >>> upd = pt.optim.get_updater(pt.optim.create("adam"))
    >>> w = pt.nd.ones((2,)); upd(0, pt.nd.ones((2,)), w)
    >>> blob = upd.get_states(dump_optimizer=True)
    >>> fresh = pt.optim.get_updater(pt.optim.create("adam")); fresh.set_states(blob)
    >>> fresh.optimizer.num_update
    1
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.errors import SerializationError
from portable.io.tensors import tensors_from_bytes, tensors_to_bytes
from portable.optim.optimizer import Optimizer, _key, from_config

STATES_FORMAT = "portable.optimizer-states"


class Updater:
    """Applies ``optimizer`` to (index, grad, weight) triples, keeping one state per index.

    Args:
        optimizer: the optimizer to apply.
    """

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizer = optimizer
        self.states: dict[Any, Any] = {}
        self._pending: dict[Any, list] = {}  # loaded host states not yet placed on a device

    def state(self, index: Any, weight: Any) -> Any:
        """The state of ``index``, created (or placed from loaded values) on first use."""
        state = self.states.get(index)
        if state is None and index not in self.states:
            state = self.optimizer.create_state(index, weight)
            loaded = self._pending.pop(index, None)
            if loaded is not None:
                _fill(state, loaded, index)
            self.states[index] = state
        return state

    def __call__(self, index: Any, grad: Any, weight: Any) -> None:
        """Update ``weight`` in place (MXNet's argument order: index, grad, weight)."""
        self.optimizer.update(index, weight, grad, self.state(index, weight))

    # -- serialisation ---------------------------------------------------------------------
    def get_states(self, dump_optimizer: bool = False) -> bytes:
        """The states (and counters; with ``dump_optimizer`` also the configuration) as bytes."""
        tensors: dict[str, np.ndarray] = {}
        entries = []
        items = [(k, _host_slots(v)) for k, v in self.states.items()]
        items += [(k, v) for k, v in self._pending.items() if k not in self.states]
        for position, (index, slots) in enumerate(items):
            present = []
            for slot, value in enumerate(slots):
                present.append(value is not None)
                if value is not None:
                    tensors[f"{position}/{slot}"] = value
            entries.append([index, present])
        meta = {"format": STATES_FORMAT, "counts": self.optimizer.counts(), "entries": entries}
        if dump_optimizer:
            meta["optimizer"] = self.optimizer.config()
        return tensors_to_bytes(tensors, meta)

    def set_states(self, data: bytes, source: str = "<optimizer states>",
                   restore_optimizer: bool = True) -> None:
        """Load states written by ``get_states``.

        Args:
            data: the bytes.
            source: names the data in errors.
            restore_optimizer: when the data holds a dumped configuration, rebuild the
                optimizer from it (MXNet's behaviour, keeping this one's ``param_dict``);
                False keeps the current optimizer and restores only states and counters.
        """
        tensors, meta = tensors_from_bytes(data, source)
        if meta.get("format") != STATES_FORMAT:
            raise SerializationError(f"{source}: not an optimizer-states file "
                                     f"(format {meta.get('format')!r})")
        if restore_optimizer and "optimizer" in meta:
            param_dict = self.optimizer.param_dict
            self.optimizer = from_config(meta["optimizer"])
            self.optimizer.param_dict = param_dict
        self.optimizer.set_counts(meta["counts"])
        self.states.clear()
        self._pending.clear()
        try:
            for position, (index, present) in enumerate(meta["entries"]):
                self._pending[_key(index)] = [tensors[f"{position}/{slot}"] if here else None
                                              for slot, here in enumerate(present)]
        except (KeyError, TypeError, ValueError) as exc:
            raise SerializationError(f"{source}: inconsistent state entries ({exc})") from None

    def save(self, path: Any, dump_optimizer: bool = True) -> None:
        """Write the states to ``path`` atomically."""
        from portable.io.atomic import atomic_write_bytes

        atomic_write_bytes(path, self.get_states(dump_optimizer))

    def load(self, path: Any) -> None:
        """Read states written by ``save``."""
        from portable.io.atomic import read_bytes

        self.set_states(read_bytes(path, "optimizer states"), str(path))


def get_updater(optimizer: Optimizer) -> Updater:
    """MXNet's ``mx.optimizer.get_updater``."""
    return Updater(optimizer)


def _slots(state: Any) -> list:
    if state is None:
        return []
    if isinstance(state, (list, tuple)):
        return list(state)
    return [state]


def _host_slots(state: Any) -> list:
    return [None if s is None else s.asnumpy() for s in _slots(state)]


def _fill(state: Any, loaded: list, index: Any) -> None:
    slots = _slots(state)
    if len(slots) != len(loaded):
        raise SerializationError(f"optimizer state of parameter {index!r}: the file has "
                                 f"{len(loaded)} arrays, the optimizer expects {len(slots)}")
    for target, value in zip(slots, loaded):
        if (target is None) != (value is None):
            raise SerializationError(f"optimizer state of parameter {index!r}: the file and "
                                     f"the optimizer disagree on which state arrays exist")
        if target is None:
            continue
        if tuple(target.shape) != tuple(value.shape):
            raise SerializationError(f"optimizer state of parameter {index!r}: shape "
                                     f"{list(value.shape)} in the file, {list(target.shape)} "
                                     f"expected")
        target[:] = value.astype(target.dtype, copy=False)
