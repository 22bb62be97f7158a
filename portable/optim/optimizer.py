"""The optimizer base class (MXNet 1.x ``mx.optimizer.Optimizer``) and the name registry.

An optimizer turns ``(index, weight, grad, state)`` into an in-place update of ``weight`` and
``state``. Each update is ONE op pushed to the dependency engine: a private update op
(``portable/ops/optim.py``: ``portable.SGDUpdate``, ``portable.AdamUpdate``, ...) invoked like
every imperative op, with the weight and state arrays as its ``out=``. It reads the gradient
and writes the weight and the state arrays, so it is ordered after the backward pass that
produced the gradient and before the next forward pass that reads the weight, without any lock;
each backend runs it with its own kernel (NumPy, OpenCL, ...).

Hyper-parameters that change between steps (the scheduled learning rate, the step count ``t``)
are read on the calling thread at push time and become the op's attributes, so an update that
runs later on a worker thread still uses the value of its own step.

Subclasses set ``update_op`` and implement ``create_state``; ``update_attrs`` adds their own
attributes to the common ones and ``update_states`` puts their state arrays in the op's input
order.

Example:
    >>> import portable as pt
    >>> opt = pt.optim.create("sgd", learning_rate=0.1)
    >>> w, g = pt.nd.array([1.0, 2.0]), pt.nd.array([1.0, 1.0])
    >>> opt.update(0, w, g, opt.create_state(0, w))
    >>> w.asnumpy().tolist()
    [0.8999999761581421, 1.899999976158142]
"""
from __future__ import annotations

from typing import Any

from portable import tape
from portable.errors import PortableError
from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import zeros
from portable.optim import lr_scheduler

# lower-case name -> optimizer class (filled by ``register``)
optimizers: dict[str, type["Optimizer"]] = {}


def register(klass: type["Optimizer"]) -> type["Optimizer"]:
    """Class decorator: make an optimizer available to ``create`` under its lower-case name."""
    optimizers[klass.__name__.lower()] = klass
    return klass


def create(name: "str | Optimizer", **kwargs: Any) -> "Optimizer":
    """An optimizer by (case-insensitive) name, MXNet's ``mx.optimizer.create``.

    Args:
        name: ``sgd``, ``nag``, ``adam``, ``adamw``, ``rmsprop``, ``adagrad`` (or an instance,
            returned unchanged when no keyword is given).
        **kwargs: constructor arguments (``learning_rate``, ``wd``, ``momentum`` ...).

    Returns:
        The optimizer.

    Example:
        >>> create("adam", learning_rate=1e-3).learning_rate
        0.001
    """
    if isinstance(name, Optimizer):
        if kwargs:
            raise PortableError("optimizer parameters must be empty when an Optimizer "
                                f"instance is given, got {sorted(kwargs)}")
        return name
    klass = optimizers.get(str(name).lower())
    if klass is None:
        raise PortableError(f"unknown optimizer {name!r}; known: {', '.join(sorted(optimizers))}")
    return klass(**kwargs)


class Optimizer:
    """Base class of the optimizers (MXNet 1.x names and semantics).

    Args:
        learning_rate: the base learning rate (the scheduler's base when one is given).
        wd: weight decay (L2) coefficient, multiplied by each parameter's ``wd_mult``.
        rescale_grad: the gradient is multiplied by this first (``Trainer.step`` sets it to
            ``1 / batch_size``).
        clip_gradient: clip the rescaled gradient to ``[-clip, clip]`` (None: no clipping).
        lr_scheduler: an ``LRScheduler`` giving the learning rate of each update number.
        param_dict: index -> Parameter, for ``lr_mult``/``wd_mult`` (set by ``Trainer``).
        begin_num_update: the update count to start from.
        multi_precision: accepted for MXNet compatibility; updates run in the weight's dtype.
    """

    default_learning_rate = 0.01
    # constructor arguments (besides the common ones) that ``config`` records
    hyper_names: tuple[str, ...] = ()
    # the private op that applies one update (``portable/ops/optim.py``)
    update_op = ""

    def __init__(self, learning_rate: float | None = None, wd: float = 0.0,
                 rescale_grad: float = 1.0, clip_gradient: float | None = None,
                 lr_scheduler: Any = None, param_dict: dict | None = None,
                 param_idx2name: dict | None = None, begin_num_update: int = 0,
                 multi_precision: bool = False) -> None:
        if learning_rate is None:
            learning_rate = (lr_scheduler.base_lr if lr_scheduler is not None
                             else self.default_learning_rate)
        self.lr = float(learning_rate)
        self.lr_scheduler = lr_scheduler
        if lr_scheduler is not None:
            lr_scheduler.base_lr = self.lr
        self.wd = float(wd)
        self.rescale_grad = float(rescale_grad)
        self.clip_gradient = None if clip_gradient is None else float(clip_gradient)
        self.param_dict = dict(param_dict or {})
        self.idx2name = dict(param_idx2name or {})
        self.begin_num_update = int(begin_num_update)
        self.num_update = int(begin_num_update)
        self._index_update_count: dict[Any, int] = {}
        self.lr_mult: dict[Any, float] = {}
        self.wd_mult: dict[Any, float] = {}
        self.multi_precision = bool(multi_precision)

    # -- learning rate -------------------------------------------------------------------
    @property
    def learning_rate(self) -> float:
        """The learning rate of the current update number (before ``lr_mult``)."""
        if self.lr_scheduler is not None:
            return float(self.lr_scheduler(self.num_update))
        return self.lr

    def set_learning_rate(self, lr: float) -> None:
        """Set the base learning rate (with a scheduler: the scheduler's ``base_lr``)."""
        self.lr = float(lr)
        if self.lr_scheduler is not None:
            self.lr_scheduler.base_lr = self.lr

    def set_lr_mult(self, args_lr_mult: dict) -> None:
        """Per-index (or per-name) learning-rate multipliers."""
        self.lr_mult = dict(args_lr_mult)

    def set_wd_mult(self, args_wd_mult: dict) -> None:
        """Per-index (or per-name) weight-decay multipliers."""
        self.wd_mult = dict(args_wd_mult)

    def _multiplier(self, index: Any, table: dict, attr: str) -> float:
        param = self.param_dict.get(index)
        if param is not None:
            return float(getattr(param, attr, 1.0))
        if index in table:
            return float(table[index])
        name = self.idx2name.get(index)
        return float(table.get(name, 1.0)) if name is not None else 1.0

    def _get_lr(self, index: Any) -> float:
        return self.learning_rate * self._multiplier(index, self.lr_mult, "lr_mult")

    def _get_wd(self, index: Any) -> float:
        return self.wd * self._multiplier(index, self.wd_mult, "wd_mult")

    def _update_count(self, index: Any) -> None:
        """Count one more update of ``index`` (a list counts each); ``num_update`` is the max."""
        for i in (index if isinstance(index, (list, tuple)) else [index]):
            count = self._index_update_count.get(i, self.begin_num_update) + 1
            self._index_update_count[i] = count
            self.num_update = max(count, self.num_update)

    # -- state and update ----------------------------------------------------------------
    def create_state(self, index: Any, weight: Any) -> Any:
        """The optimizer state for one weight: None, an NDArray or a tuple of NDArrays."""
        return None

    def create_state_multi_precision(self, index: Any, weight: Any) -> Any:
        return self.create_state(index, weight)

    def update(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        """Update ``weight`` (and ``state``) in place from ``grad``: one pushed engine op.

        Lists of equal length update several parameters (MXNet 2's multi-index form).
        """
        if isinstance(index, (list, tuple)):
            for i, w, g, s in zip(index, weight, grad, state):
                self.update(i, w, g, s)
            return
        self._update_count(index)
        self.push_update(index, weight, grad, state)

    update_multi_precision = update

    def hyper(self, index: Any) -> dict:
        """The per-step scalars captured at push time: learning rate, weight decay, count."""
        return {"lr": self._get_lr(index), "wd": self._get_wd(index), "t": self.count_of(index)}

    def count_of(self, index: Any) -> int:
        """How many updates ``index`` has had (the step number ``t`` of its latest)."""
        return self._index_update_count.get(index, self.num_update)

    def update_attrs(self, index: Any) -> dict:
        """The update op's attributes for one step of ``index`` (subclasses add theirs).

        Args:
            index: the parameter's index.

        Returns:
            Learning rate, weight decay, gradient rescale and clip (None: no clipping).
        """
        hyper = self.hyper(index)
        return {"lr": hyper["lr"], "wd": hyper["wd"], "rescale_grad": self.rescale_grad,
                "clip_gradient": self.clip_gradient}

    def update_states(self, states: list) -> list:
        """The state arrays in the update op's input order (None for an absent optional one).

        Args:
            states: the NDArrays of the state, as ``flatten_state`` lists them.

        Returns:
            The op's state inputs.
        """
        return states

    def push_update(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        """Push the fused update of one weight without counting a step.

        ``Trainer`` uses this to apply one counted step to the copies of a parameter on
        several devices.
        """
        if not self.update_op:
            raise NotImplementedError(f"{type(self).__name__} names no update op")
        states = self.update_states(flatten_state(state))
        # An update is never part of a gradient, even when a step runs inside record().
        with tape.scope(False, None):
            invoke(self.update_op, [weight, grad, *states], self.update_attrs(index),
                   out=(weight, *states))

    # -- configuration (JSON, for checkpoints) ---------------------------------------------
    def config(self) -> dict:
        """The constructor arguments as JSON data: ``create(**config)`` rebuilds the optimizer."""
        conf = {"name": type(self).__name__.lower(), "learning_rate": self.lr, "wd": self.wd,
                "rescale_grad": self.rescale_grad, "clip_gradient": self.clip_gradient,
                "begin_num_update": self.begin_num_update}
        conf.update({name: getattr(self, name) for name in self.hyper_names})
        if self.lr_scheduler is not None:
            conf["lr_scheduler"] = self.lr_scheduler.config()
        return conf

    def counts(self) -> dict:
        """The update counters as JSON data (keys are kept with their type)."""
        return {"num_update": self.num_update,
                "index_update_count": [[k, v] for k, v in self._index_update_count.items()]}

    def set_counts(self, counts: dict) -> None:
        self.num_update = int(counts["num_update"])
        self._index_update_count = {_key(k): int(v) for k, v in counts["index_update_count"]}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items() if k != "name")
        return f"{type(self).__name__}({args})"


def _key(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def from_config(conf: dict) -> Optimizer:
    """Rebuild an optimizer from ``Optimizer.config()`` output."""
    conf = dict(conf)
    sched = conf.pop("lr_scheduler", None)
    if sched is not None:
        conf["lr_scheduler"] = lr_scheduler.from_config(sched)
    return create(conf.pop("name"), **conf)


def flatten_state(state: Any) -> list:
    """The NDArrays of a state (None, an NDArray, or a tuple/list of NDArrays or None)."""
    if state is None:
        return []
    if isinstance(state, (list, tuple)):
        return [s for s in state if s is not None]
    return [state]


def zeros_state(weight: Any, count: int) -> Any:
    """``count`` zero arrays shaped like ``weight`` (a single array when count is 1)."""
    arrays = tuple(zeros(weight.shape, weight.device, weight.dtype) for _ in range(count))
    return arrays[0] if count == 1 else arrays
