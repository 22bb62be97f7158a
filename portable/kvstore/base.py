"""The KVStore interface (MXNet 1.x ``mx.kv.KVStore``) and the push/pull pipeline every store
shares.

A KVStore holds one value per key. ``push`` aggregates the values given for a key (one per
device), then either stores the sum or, once ``set_optimizer`` was called, treats it as a
gradient and updates the stored weight with the optimizer ("update on the store"). ``pull``
copies the stored value out to one array per device; ``pushpull`` does both.

The pipeline of one push, with the hooks a store overrides:

1. ``_reduce(key, values)``: sum the per-device values of this process (device copies and
   additions are engine ops, so they overlap with whatever else is queued);
2. ``_global_reduce(key, merged, priority)``: combine across processes (identity here; the
   MPI stores allreduce, with ``priority`` ordering the communication). The keys of one
   ``pushpull`` call go through ``_global_reduce_group``, which a store may reduce as a group;
3. ``_apply(key, merged)``: run the updater on the stored weight, or store the sum.

``rank``, ``num_workers``, ``barrier`` and ``_broadcast_init`` (make every process start from
rank 0's initial values) are the other hooks of distributed stores. Everything is pushed to the
dependency engine through NDArray ops, so ordering comes from engine variables.

Example:
    >>> import portable as pt
    >>> kv = pt.kv.create("local")
    >>> kv.init(3, pt.nd.ones((2,)))
    >>> kv.push(3, [pt.nd.ones((2,)), pt.nd.ones((2,))])
    >>> out = pt.nd.zeros((2,)); kv.pull(3, out=out); out.asnumpy().tolist()
    [2.0, 2.0]
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from portable.device import Device, cpu
from portable.errors import PortableError

if TYPE_CHECKING:
    from portable.optim.optimizer import Optimizer


class KVStore:
    """Base class and the single-process semantics shared by every store.

    Args:
        name: the store type (``local``, ``device`` ...), returned by ``type``.
    """

    # whether gluon.Trainer applies the optimizer on the store when the user does not say
    default_update_on_kvstore = False

    def __init__(self, name: str = "local") -> None:
        self._type = name
        self._store: dict[Any, Any] = {}
        self._borrowed: set[Any] = set()  # keys whose stored value is a caller's array
        # applies the optimizer on push; its optimizer is the store's (one source of truth:
        # loading states may rebuild it from the saved configuration)
        self._updater: Any = None
        self._compression: dict | None = None

    # -- identity --------------------------------------------------------------------------
    @property
    def type(self) -> str:
        """The store type name given to ``create``."""
        return self._type

    @property
    def rank(self) -> int:
        """This worker's rank among ``num_workers`` (0 in a single process)."""
        return 0

    @property
    def num_workers(self) -> int:
        """How many worker processes share the store (1 in a single process)."""
        return 1

    def barrier(self) -> None:
        """Wait until every worker reaches this call (nothing to wait for in one process)."""

    @property
    def group_bytes(self) -> int:
        """Keys whose values total at most this many bytes are best pushed in one ``pushpull``
        call (``gluon.Trainer`` then does): a store that reduces a call's keys as one group
        costs less per call than per key. 0 here: in one process it makes no difference."""
        return 0

    def declare_group(self, keys: list) -> None:
        """Tell the store that ``keys`` will be pushed together by one ``pushpull`` call at
        every step (a store may then move them as one request; collective in a distributed
        store). Nothing to do in one process."""

    @property
    def wants_contiguous_gradients(self) -> bool:
        """Whether gradients laid back to back in one buffer reduce faster here (``Trainer``
        then allocates them so). False here: in one process nothing travels."""
        return False

    @property
    def traffic(self) -> dict:
        """Bytes this rank's store moved between processes so far, ``{"sent", "received",
        "messages"}`` (what is counted: :mod:`portable.kvstore.traffic`); zeros in one process.

        Example:
            >>> import portable as pt
            >>> pt.kv.create("local").traffic
            {'sent': 0, 'received': 0, 'messages': 0}
        """
        return {"sent": 0, "received": 0, "messages": 0}

    @property
    def bytes_sent(self) -> int:
        """Payload bytes this rank's store sent to other processes (``traffic["sent"]``)."""
        return self.traffic["sent"]

    @property
    def bytes_received(self) -> int:
        """Payload bytes this rank's store received (``traffic["received"]``)."""
        return self.traffic["received"]

    def is_capable(self, capability: str) -> bool:
        """Whether the store supports ``capability`` (``"optimizer"``: update on the store)."""
        return capability == "optimizer"

    # -- device placement (overridden by stores that aggregate elsewhere) --------------------
    def _store_device(self, value: Any) -> Device:
        """Where the stored value of a key lives, given the first value seen for it."""
        return cpu()

    # -- the interface ---------------------------------------------------------------------
    def init(self, key: Any, value: Any) -> None:
        """Give each key its initial value (a copy of the value, or of the first of a list).

        Args:
            key: an int or str key, or a list of them.
            value: an NDArray (or a list of NDArrays, one per device) per key.
        """
        for k, values in _pairs(key, value, "init"):
            if k in self._store:
                raise PortableError(f"kvstore {self.type}: key {k!r} is already initialised")
            first = values[0]
            stored = first.copyto(self._store_device(first))
            self._store[k] = self._broadcast_init(k, stored)

    def push(self, key: Any, value: Any, priority: int = 0) -> None:
        """Aggregate the values of each key (summed over devices) into the store.

        Args:
            key: a key or a list of keys.
            value: per key, an NDArray or a list of NDArrays (one per device).
            priority: scheduling priority of the communication (higher goes first).
        """
        for k, values in _pairs(key, value, "push"):
            self._check_key(k, "push")
            self._apply(k, self._global_reduce(k, self._reduce(k, values), priority))

    def pull(self, key: Any, out: Any = None, priority: int = 0,
             ignore_sparse: bool = True) -> None:
        """Copy the stored value of each key into ``out`` (an NDArray or a list per key)."""
        if out is None:
            raise PortableError(f"kvstore {self.type}: pull needs out= arrays to copy into")
        for k, outs in _pairs(key, out, "pull"):
            self._check_key(k, "pull")
            stored = self._store[k]
            for target in outs:
                if target is not stored:
                    stored.copyto(target)

    def pushpull(self, key: Any, value: Any, out: Any = None, priority: int = 0) -> None:
        """``push`` then ``pull`` (into ``value`` itself when ``out`` is None).

        Without an optimizer on the store, a single value that is also the output is already
        the sum: the store then keeps that array instead of copying it, until a later push
        (which then stores a copy, leaving the caller's array alone).
        """
        pairs = _pairs(key, value, "pushpull")
        outs_by_key = None if out is None else dict(_pairs(key, out, "pushpull"))
        store = self._store
        for k, _ in pairs:
            if k not in store:
                self._check_key(k, "pushpull")
        reduce = self._reduce
        reduced = self._global_reduce_group(
            [(k, values[0] if len(values) == 1 and self._updater is None else reduce(k, values))
             for k, values in pairs], priority)
        for (k, values), merged in zip(pairs, reduced):
            targets = values if outs_by_key is None else outs_by_key[k]
            if self._updater is not None:
                self._apply(k, merged)
                self.pull(k, out=targets, priority=priority)
                continue
            store[k] = merged
            self._borrowed.add(k)
            for target in targets:
                if target is not merged:
                    merged.copyto(target)

    def broadcast(self, key: Any, value: Any, out: Any, priority: int = 0) -> None:
        """Initialise ``key`` with ``value`` (rank 0's, in a distributed store) and pull it into
        ``out``."""
        self.init(key, value)
        self.pull(key, out=out, priority=priority)

    def row_sparse_pull(self, key: Any, out: Any = None, priority: int = 0,
                        row_ids: Any = None) -> None:
        raise PortableError(f"kvstore {self.type}: sparse storage is not supported")

    def set_gradient_compression(self, compression_params: dict) -> None:
        """Compress gradients before communication (only distributed stores support it)."""
        raise PortableError(f"kvstore {self.type}: gradient compression is only supported by "
                            f"distributed stores")

    # -- optimizer on the store -------------------------------------------------------------
    def set_optimizer(self, optimizer: Any) -> None:
        """Update stored weights with ``optimizer`` on every push (gradients are pushed)."""
        from portable.optim.updater import get_updater

        self._set_updater(get_updater(optimizer))

    def _set_updater(self, updater: Any) -> None:
        self._updater = updater

    @property
    def optimizer(self) -> Optimizer | None:
        """The optimizer applied on the store (None before ``set_optimizer``).

        Loading states with their configuration rebuilds it, so read it again after
        ``load_optimizer_states`` or ``set_optimizer_states``.

        Example:
            >>> import portable as pt
            >>> kv = pt.kv.create("local"); kv.set_optimizer(pt.optim.create("sgd"))
            >>> type(kv.optimizer).__name__
            'SGD'
        """
        return getattr(self._updater, "optimizer", None)

    def get_optimizer_states(self, dump_optimizer: bool = False) -> bytes:
        """The optimizer states of this process's updater, as the bytes
        ``save_optimizer_states`` writes in a single process (a ``dist_async`` store with
        parameter servers keeps the states that count on the servers: its
        ``save_optimizer_states`` collects those).

        Args:
            dump_optimizer: include the optimizer's configuration.

        Returns:
            A safetensors tensor file, for ``set_optimizer_states``.
        """
        self._require_updater("get_optimizer_states")
        return self._updater.get_states(dump_optimizer)

    def set_optimizer_states(self, data: bytes, source: str = "<optimizer states>",
                             restore_optimizer: bool = True) -> None:
        """Load optimizer states from ``get_optimizer_states`` bytes into this process's
        updater.

        Args:
            data: the bytes.
            source: names the data in errors.
            restore_optimizer: rebuild the optimizer from a saved configuration (then
                ``optimizer`` is a new object); False keeps the optimizer and restores only
                the states and update counters.
        """
        self._require_updater("set_optimizer_states")
        self._updater.set_states(data, source, restore_optimizer)

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        """Write the store's optimizer states (safetensors + JSON, atomically)."""
        self._require_updater("save_optimizer_states")
        self._updater.save(fname, dump_optimizer)

    def load_optimizer_states(self, fname: str) -> None:
        """Read optimizer states written by ``save_optimizer_states``."""
        self._require_updater("load_optimizer_states")
        self._updater.load(fname)

    # -- pipeline stages (hooks) -------------------------------------------------------------
    def _reduce(self, key: Any, values: Sequence[Any]) -> Any:
        """Sum this process's per-device values, on the store device when an updater runs."""
        stored = self._store[key]
        if len(values) == 1 and (self._updater is None or values[0].device == stored.device):
            return values[0]
        device = stored.device
        merged = values[0].copyto(device)
        for value in values[1:]:
            merged += value.as_in_context(device)
        return merged

    def _global_reduce(self, key: Any, merged: Any, priority: int) -> Any:
        """Combine ``merged`` across processes (a single process has nothing to combine)."""
        return merged

    def _global_reduce_group(self, items: list[tuple[Any, Any]], priority: int) -> list:
        """``_global_reduce`` of several ``(key, merged)`` at once (the keys of one ``pushpull``
        call); a store may combine them as one group."""
        return [self._global_reduce(k, merged, priority) for k, merged in items]

    def _broadcast_init(self, key: Any, value: Any) -> Any:
        """Make every process start from the same initial value (rank 0's)."""
        return value

    def _apply(self, key: Any, merged: Any) -> None:
        stored = self._store[key]
        if key in self._borrowed:  # never write into the array a pushpull lent the store
            self._borrowed.discard(key)
            stored = self._store[key] = stored.copy()
        if self._updater is not None:
            self._updater(key, merged, stored)
        elif merged is not stored:
            merged.copyto(stored)

    # -- helpers ---------------------------------------------------------------------------
    def _check_key(self, key: Any, what: str) -> None:
        if key not in self._store:
            raise PortableError(f"kvstore {self.type}: {what} of key {key!r} before init; "
                                f"initialised keys: {sorted(map(str, self._store))[:10]}")

    def _require_updater(self, what: str) -> None:
        if self._updater is None:
            raise PortableError(f"kvstore {self.type}: {what} needs an optimizer on the store "
                                f"(call set_optimizer first)")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} type={self.type} keys={len(self._store)}>"


def _pairs(key: Any, value: Any, what: str) -> list[tuple[Any, list]]:
    """Normalise (key, value) to [(key, [arrays...])]: one key or a list of keys, each with one
    array or a list of per-device arrays."""
    if not isinstance(key, (list, tuple)):
        return [(_check_key_type(key), _as_list(value))]
    if not isinstance(value, (list, tuple)) or len(value) != len(key):
        raise PortableError(f"kvstore {what}: {len(key)} keys need a list of as many "
                            f"values, got {type(value).__name__}")
    # (a step pushes a list of keys with one array each: one pass, no call per key)
    pairs = [(k, list(v) if isinstance(v, (list, tuple)) else [v]) for k, v in zip(key, value)]
    for k, values in pairs:
        if not isinstance(k, (int, str)) or not values:
            _check_key_type(k)
            _as_list(values)
    return pairs


def _check_key_type(key: Any) -> Any:
    if not isinstance(key, (int, str)):
        raise PortableError(f"kvstore keys are int or str, got {type(key).__name__}: {key!r}")
    return key


def _as_list(value: Any) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise PortableError("kvstore: an empty list of values")
    return values
