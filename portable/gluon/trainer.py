"""``gluon.Trainer`` (MXNet 1.x): applies an optimizer to a set of Parameters through a KVStore.

``step(batch_size)`` is ``allreduce_grads()`` followed by ``update(batch_size)`` (one fused
optimizer op per parameter and device, pushed to the engine). ``allreduce_grads`` sums each
parameter's gradients (one per device) through the store's ``pushpull``, in groups of
neighbouring keys that fill what the store reduces as one group (its ``group_bytes``: one
fusion bucket for ``dist_sync``; PyTorch DDP's gradient buckets), formed from the last layer
back as backward produces them: a group starts communicating once its last gradient exists, so
the last layers' communication overlaps the rest of backward, and a model of 161 tensors costs
the store a few dozen engine ops a step instead of 161. A store with no ``group_bytes`` gets
the keys one by one.
With ``update_on_kvstore`` the store applies the optimizer instead: gradients are pushed and
the new weights pulled. Any store from ``portable.kv.create`` plugs in unchanged.

The gradient is rescaled by ``rescale_grad / batch_size`` inside the update op, so a loss summed
(or averaged per sample, as Gluon's losses are) over the batch gives the mean gradient.

Example:
    >>> import portable as pt
    >>> from portable.gluon import Parameter
    >>> w = Parameter("w", shape=(2,)); w.initialize(pt.init.One())
    >>> trainer = Trainer([w], "sgd", {"learning_rate": 0.5})
    >>> with pt.autograd.record():
    ...     loss = (w.data() * w.data()).sum()
    >>> loss.backward(); trainer.step(1)
    >>> w.data().asnumpy().tolist()
    [0.0, 0.0]
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from portable.errors import PortableError
from portable.gluon.trainer_states import check_replica_states, check_states
from portable.io import files

# An optimizer-states file larger than this is not one portable wrote (a bound, not a budget).
MAX_STATES_BYTES = 1 << 40


def _param_list(params: Any) -> list:
    if hasattr(params, "values") and callable(params.values):
        params = list(params.values())
    elif not isinstance(params, (list, tuple)):
        raise PortableError(f"Trainer: params must be a ParameterDict, a dict or a list of "
                            f"Parameters, got {type(params).__name__}")
    unique, seen = [], set()
    for param in params:
        if not hasattr(param, "list_data"):
            raise PortableError(f"Trainer: {param!r} is not a Parameter")
        if id(param) not in seen:  # shared parameters appear once
            seen.add(id(param))
            unique.append(param)
    return unique


def gradient_groups(nbytes: list[int], group_bytes: int) -> list[list[int]]:
    """Split keys ``0..len(nbytes)-1`` (in forward order) into the runs of neighbours that one
    ``pushpull`` call each reduces: filled from the last key back, as backward produces the
    gradients, each run at most ``group_bytes`` (a larger tensor goes alone); runs are listed
    first layers first. ``group_bytes`` 0: every key alone.

    Example:
        >>> gradient_groups([448, 64, 192, 12], 300)
        [[0], [1, 2, 3]]
        >>> gradient_groups([4, 4], 0)
        [[0], [1]]
    """
    if group_bytes <= 0:
        return [[key] for key in range(len(nbytes))]
    groups: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for key in reversed(range(len(nbytes))):
        if current and filled + nbytes[key] > group_bytes:
            groups.append(current[::-1])
            current, filled = [], 0
        current.append(key)
        filled += nbytes[key]
    if current:
        groups.append(current[::-1])
    return groups[::-1]


class Trainer:
    """Applies an optimizer to parameters (MXNet 1.x ``gluon.Trainer``).

    Args:
        params: a ParameterDict (``net.collect_params()``), a dict or a list of Parameters.
        optimizer: an optimizer name (``sgd``, ``adam`` ...) or an Optimizer.
        optimizer_params: keyword arguments of the optimizer (``learning_rate``, ``wd`` ...).
        kvstore: a store name (``local``, ``device``, ``dist_sync`` ...) or a KVStore; None
            means ``local``.
        compression_params: gradient compression for stores that support it.
        update_on_kvstore: apply the optimizer on the store (default: the store's choice).
    """

    def __init__(self, params: Any, optimizer: Any, optimizer_params: dict | None = None,
                 kvstore: Any = "local", compression_params: dict | None = None,
                 update_on_kvstore: bool | None = None) -> None:
        from portable import optim

        self._params = _param_list(params)
        optimizer_params = dict(optimizer_params or {})
        self._scale = float(optimizer_params.get("rescale_grad", 1.0))
        self._optimizer = optim.create(optimizer, **optimizer_params)
        self._optimizer.param_dict = dict(enumerate(self._params))
        self._kvstore_spec = kvstore if kvstore is not None else "local"
        self._compression_params = compression_params
        self._update_on_kvstore = update_on_kvstore
        self._kvstore: Any = None
        self._updaters: list = []
        self._devices: list = []
        self._pending_states: tuple | None = None
        self._groups_of: dict[tuple[int, ...], list[list[int]]] = {}  # trained keys -> groups

    # -- properties ------------------------------------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The optimizer's current learning rate."""
        return self._optimizer.learning_rate

    def set_learning_rate(self, lr: float) -> None:
        """Set the optimizer's (base) learning rate."""
        self._optimizer.set_learning_rate(lr)

    @property
    def optimizer(self) -> Any:
        return self._optimizer

    @property
    def kvstore(self) -> Any:
        """The KVStore (created at the first step)."""
        return self._kvstore

    @property
    def rank(self) -> int:
        """This worker's rank in the store (0 in a single process); known before the first
        step when the trainer was given a store object rather than a name."""
        store = self._kvstore if self._kvstore is not None else self._kvstore_spec
        return int(getattr(store, "rank", 0))

    @property
    def update_on_kvstore(self) -> bool:
        self._init_kvstore()
        return bool(self._update_on_kvstore)

    # -- set-up ----------------------------------------------------------------------------
    def _init_kvstore(self) -> None:
        if self._kvstore is not None:
            return
        from portable import kv
        from portable.optim import get_updater

        devices = None
        for param in self._params:
            found = param.list_device()
            if devices is not None and found != devices:
                raise PortableError(f"Trainer: Parameter {param.name!r} lives on "
                                    f"{[str(d) for d in found]}, others on "
                                    f"{[str(d) for d in devices]}; all must share devices")
            devices = found
        store = kv.create(self._kvstore_spec)
        if self._compression_params:
            store.set_gradient_compression(self._compression_params)
        if self._update_on_kvstore is None:
            self._update_on_kvstore = store.default_update_on_kvstore
        if self._update_on_kvstore and not store.is_capable("optimizer"):
            raise PortableError(f"kvstore {store.type} cannot apply the optimizer; use "
                                f"update_on_kvstore=False")
        if self._update_on_kvstore:
            store.set_optimizer(self._optimizer)
        for index, param in enumerate(self._params):
            data = param.list_data()
            store.init(index, data[0])
            store.pull(index, out=data, priority=-index)  # every device/worker starts equal
        self._kvstore, self._devices = store, list(devices or [])
        if store.wants_contiguous_gradients and len(self._devices) == 1:
            self._lay_gradients_back_to_back()
        for group in self.gradient_groups():  # (the store may move each as one request)
            store.declare_group(group)
        self._updaters = [get_updater(self._optimizer) for _ in self._devices]
        if self._pending_states is not None:
            pending, self._pending_states = self._pending_states, None
            self.set_states(*pending)

    # -- training step ---------------------------------------------------------------------
    def step(self, batch_size: int, ignore_stale_grad: bool = False) -> None:
        """One optimizer step: ``allreduce_grads()`` then ``update(batch_size)``.

        Args:
            batch_size: the gradient is divided by it (with ``rescale_grad``).
            ignore_stale_grad: accepted for MXNet compatibility (gradients are not tracked
                for freshness; parameters with ``grad_req='null'`` are skipped).
        """
        self._init_kvstore()
        self._optimizer.rescale_grad = self._scale / batch_size
        if self._update_on_kvstore:
            self._update_through_store()
            return
        self.allreduce_grads()
        self._update_locally()

    def allreduce_grads(self) -> None:
        """Sum each parameter's gradients over devices (and workers) in place, through the
        store; for a custom step between reduction and ``update``."""
        self._init_kvstore()
        if self._update_on_kvstore:
            raise PortableError("allreduce_grads() is not available with update_on_kvstore=True"
                                "; the store reduces and updates in step()")
        for group in self.gradient_groups():
            if len(group) == 1:
                self._kvstore.pushpull(group[0], self._params[group[0]].list_grad(),
                                       priority=-group[0])
            else:
                self._kvstore.pushpull(group, [self._params[i].list_grad() for i in group],
                                       priority=-group[0])

    def update(self, batch_size: int, ignore_stale_grad: bool = False) -> None:
        """Apply the optimizer to the (already reduced) gradients."""
        self._init_kvstore()
        if self._update_on_kvstore:
            raise PortableError("update() is not available with update_on_kvstore=True; "
                                "call step()")
        self._optimizer.rescale_grad = self._scale / batch_size
        self._update_locally()

    def _update_locally(self) -> None:
        optimizer = self._optimizer
        for index, param in enumerate(self._params):
            if param.grad_req == "null":
                continue
            optimizer._update_count(index)  # one step, however many device copies
            for updater, weight, grad in zip(self._updaters, param.list_data(),
                                             param.list_grad()):
                optimizer.push_update(index, weight, grad, updater.state(index, weight))

    def _lay_gradients_back_to_back(self) -> None:
        """Give the gradients one buffer per dtype, in key order (PyTorch DDP's
        ``gradient_as_bucket_view``): the store then reduces neighbours as one range."""
        from portable.ndarray import contiguous_zeros

        by_dtype: dict = {}
        for param in self._params:
            if param.grad_req != "null":
                grad = param.list_grad()[0]
                by_dtype.setdefault((grad.dtype, grad.device), []).append(param)
        for (dtype, device), params in by_dtype.items():
            grads = contiguous_zeros([p.list_grad()[0].shape for p in params], device, dtype)
            for param, grad in zip(params, grads):
                param.list_grad()[0].copyto(grad)  # (the first step's backward already ran)
                param._set_grad_storage([grad])

    def _trained(self) -> list[int]:
        return [i for i, p in enumerate(self._params) if p.grad_req != "null"]

    def _update_through_store(self) -> None:
        for group in self.gradient_groups():
            if len(group) == 1:
                self._kvstore.pushpull(group[0], self._params[group[0]].list_grad(),
                                       out=self._params[group[0]].list_data(),
                                       priority=-group[0])
            else:
                self._kvstore.pushpull(group, [self._params[i].list_grad() for i in group],
                                       out=[self._params[i].list_data() for i in group],
                                       priority=-group[0])

    def gradient_groups(self) -> list[list[int]]:
        """The keys of each ``pushpull`` call of a step (:func:`gradient_groups`), for the
        parameters trained now (cached per set: ``grad_req`` may change between steps)."""
        self._init_kvstore()
        trained = tuple(self._trained())
        groups = self._groups_of.get(trained)
        if groups is None:
            nbytes = [self._params[i].list_data()[0].size
                      * np.dtype(self._params[i].list_data()[0].dtype).itemsize
                      for i in trained]
            groups = [[trained[place] for place in group]
                      for group in gradient_groups(nbytes, self._kvstore.group_bytes)]
            self._groups_of[trained] = groups
        return groups

    def pull_center(self) -> None:
        """Overwrite the parameters with the store's centre: the model that stores training
        one replica per worker group export (EASGD: the servers' centre variable; local SGD:
        the workers' average, collective there). Call it after training, before evaluating or
        saving the model; the next ``step`` trains the replicas again.

        Raises:
            PortableError: the store keeps no centre (each worker's parameters are the model).
        """
        self._init_kvstore()
        pull = getattr(self._kvstore, "pull_center", None)
        if pull is None:
            raise PortableError(f"Trainer.pull_center: kvstore {self._kvstore.type} keeps no "
                                f"centre; every worker's parameters are the model")
        for index in self._trained():  # the others (BatchNorm statistics) are this worker's
            pull(index, out=self._params[index].list_data(), priority=-index)

    # -- optimizer states ------------------------------------------------------------------
    def get_states(self) -> bytes | None:
        """The optimizer states and configuration as bytes (a safetensors tensor file).

        With a store that trains one replica per worker group (EASGD, local SGD:
        ``is_capable("replica_states")``) the bytes are the store's whole training state
        (``checkpoint_bytes``: every group's replica, optimizer states and step counters, and
        what the algorithm adds): collective there, every worker calls it; rank 0 gets the
        bytes, the other workers None.
        """
        if self._kvstore is None:
            if self._pending_states is not None:
                return self._pending_states[0]
            from portable.optim import get_updater

            return get_updater(self._optimizer).get_states(dump_optimizer=True)
        if self.holds_replica_states:
            return self._kvstore.checkpoint_bytes()
        if self._update_on_kvstore:
            return self._kvstore.get_optimizer_states(dump_optimizer=True)
        return self._updaters[0].get_states(dump_optimizer=True)

    @property
    def holds_replica_states(self) -> bool:
        """Whether the states are the store's replicas as well (``get_states`` and
        ``set_states`` are then collective); known before the first step when the trainer
        was given a store object."""
        store = self._kvstore if self._kvstore is not None else self._kvstore_spec
        capable = getattr(store, "is_capable", None)
        return (capable is not None and capable("replica_states")
                and self._update_on_kvstore is not False)

    def get_center(self) -> dict:
        """The store's centre (see ``pull_center``) of the parameters it trains, leaving this
        worker's replica in the parameters: what a checkpoint saves as the model. Collective
        where the store's ``pull_center`` is (local SGD).

        Returns:
            ``{Parameter: numpy array}`` for every parameter whose ``grad_req`` is not
            ``null`` (the others are not trained through the store: each worker's own).

        Raises:
            PortableError: the store keeps no centre.

        Example:
            >>> centre = trainer.get_center()                       # doctest: +SKIP
            >>> centre[net.collect_params()["dense0_weight"]].shape  # doctest: +SKIP
            (64, 64)
        """
        from portable.ndarray import empty

        self._init_kvstore()
        pull = getattr(self._kvstore, "pull_center", None)
        if pull is None:
            raise PortableError(f"Trainer.get_center: kvstore {self._kvstore.type} keeps no "
                                f"centre; every worker's parameters are the model")
        centre = {}
        for index in self._trained():
            param = self._params[index]
            weight = param.list_data()[0]
            centre[param] = empty(weight.shape, device=weight.device, dtype=weight.dtype)
            pull(index, out=centre[param], priority=-index)
        return {param: array.asnumpy() for param, array in centre.items()}

    def set_states(self, data: bytes, source: str = "<trainer states>",
                   restore_optimizer: bool = True) -> None:
        """Load states from ``get_states`` bytes (before the first step they are kept and
        applied when the store is created). The bytes are checked against this trainer's
        parameters first (``check_states``): nothing is applied from a damaged file.

        With a store that trains one replica per worker group (``holds_replica_states``) the
        call is collective (every worker passes the same bytes): the store is set up now if
        need be (the parameters must be initialised), restores every group's replica,
        optimizer states, step counters and what its algorithm adds, and this worker's
        replica is pulled into the parameters it trains.

        Args:
            data: the bytes.
            source: names the data in errors.
            restore_optimizer: rebuild the optimizer from the saved configuration (MXNet's
                behaviour); False keeps this trainer's optimizer and hyper-parameters and
                restores only the states and update counters.

        Raises:
            SerializationError: the data is damaged, or does not fit these parameters or this
                optimizer (names ``source``, the key and the parameter).
        """
        self.check_states(data, source, restore_optimizer)
        if self.holds_replica_states:
            self._set_replica_states(data, source, restore_optimizer)
            return
        if self._kvstore is None:
            self._pending_states = (data, source, restore_optimizer)
            return
        if self._update_on_kvstore:
            self._kvstore.set_optimizer_states(data, source, restore_optimizer)
            self._adopt_store_optimizer()
            return
        param_dict = self._optimizer.param_dict
        for updater in self._updaters:
            updater.set_states(data, source, restore_optimizer)
        self._optimizer = self._updaters[0].optimizer
        self._optimizer.param_dict = param_dict
        for updater in self._updaters:  # one optimizer (and update counters) for every device
            updater.optimizer = self._optimizer

    def check_states(self, data: bytes, source: str = "<trainer states>",
                     restore_optimizer: bool = True) -> None:
        """Check ``get_states`` bytes against this trainer without applying them (see
        ``portable.gluon.trainer_states``; with ``holds_replica_states``, a replica store's
        checkpoint: checked alike on every worker, nothing collective).

        Raises:
            SerializationError: naming ``source``, the key and the parameter at fault.
        """
        if self.holds_replica_states:
            check_replica_states(data, source, self._params, self._optimizer,
                                 restore_optimizer)
            return
        check_states(data, source, self._params, self._optimizer, restore_optimizer)

    def _set_replica_states(self, data: bytes, source: str, restore_optimizer: bool) -> None:
        """Restore a replica store's ``checkpoint_bytes`` (collective: every worker calls it
        with the same bytes), setting the store up first if need be (the parameters must be
        initialised), then pull this worker's replica into the parameters it trains."""
        self._init_kvstore()
        store = self._kvstore
        store.restore_checkpoint(data, source)  # (the saved configuration is rebuilt)
        if restore_optimizer:
            self._adopt_store_optimizer()
        else:  # this trainer's optimizer, given the restored states and counters
            restored = store.get_optimizer_states()
            store.set_optimizer(self._optimizer)
            store.set_optimizer_states(restored, source, restore_optimizer=False)
        for index in self._trained():  # (the others' values are this worker's own)
            store.pull(index, out=self._params[index].list_data(), priority=-index)

    def save_states(self, fname: str | os.PathLike) -> None:
        """Write the optimizer states to ``fname`` (safetensors + JSON, atomically); with the
        optimizer on the store, the store writes them (a parameter server holds them)."""
        from portable.io.atomic import atomic_write_bytes

        if self._kvstore is not None and self._update_on_kvstore:
            self._kvstore.save_optimizer_states(str(fname), dump_optimizer=True)
            return
        atomic_write_bytes(fname, self.get_states())

    def load_states(self, fname: str | os.PathLike) -> None:
        """Read optimizer states written by ``save_states`` (the optimizer is rebuilt from
        the saved configuration, as MXNet does). With a store whose states file also holds
        the workers' replicas (EASGD, local SGD: ``is_capable("replica_states")``), the
        store is set up first if need be (only it reads such a file) and the parameters are
        pulled from it afterwards.

        Raises:
            SerializationError: the file is unreadable, not a regular file, damaged, or does
                not fit this trainer (names the file, the key and the parameter).
        """
        spec = self._kvstore_spec
        if self._kvstore is None and getattr(spec, "is_capable", None) is not None \
                and spec.is_capable("replica_states"):
            self._init_kvstore()
        if self._kvstore is not None and self._update_on_kvstore:
            # The store reads the file (a distributed one on rank 0, or on its servers).
            self._kvstore.load_optimizer_states(str(fname))
            self._adopt_store_optimizer()
            if self._kvstore.is_capable("replica_states"):  # the file held the weights too
                for index in self._trained():  # (the others are this worker's own)
                    self._kvstore.pull(index, out=self._params[index].list_data(),
                                       priority=-index)
            return
        data = files.read_bytes(fname, "optimizer states", limit=MAX_STATES_BYTES)
        self.set_states(data, str(fname))

    def _adopt_store_optimizer(self) -> None:
        """After the store loaded states, train with the store's optimizer (loading may have
        rebuilt it from the saved configuration), given this trainer's ``param_dict``."""
        param_dict = self._optimizer.param_dict
        self._optimizer = self._kvstore.optimizer
        self._optimizer.param_dict = param_dict
