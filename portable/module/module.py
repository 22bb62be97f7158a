"""``Module``: a Symbol trained and run through one bound executor (MXNet 1.x's
``mx.mod.Module``).

The module keeps its own copy of the parameters (``get_params``) and binds the symbol with
MXNet's gradient requests: parameters ``grad_req`` (``null`` for ``fixed_param_names``), data
``write`` only with ``inputs_need_grad``, labels ``null``. A batch of another shape rebinds the
executor, sharing the parameter, gradient and state arrays. Updates go through an ``Updater``
(one state per parameter index, ``rescale_grad = 1 / batch_size`` by default), as MXNet does on
one device. Several contexts are accepted, but the module runs on the first.

Example:
    >>> import portable as mx
    >>> data = mx.sym.var("data")
    >>> net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(data, num_hidden=3, name="fc"),
    ...                            name="softmax")
    >>> mod = mx.mod.Module(net, context=mx.cpu())
    >>> mod.bind(data_shapes=[("data", (4, 5))], label_shapes=[("softmax_label", (4,))])
    >>> mod.init_params()
    >>> sorted(mod.get_params()[0])
    ['fc_bias', 'fc_weight']
"""
from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from typing import Any, Sequence

from portable.device import as_device
from portable.errors import BindError, PortableError
from portable.initializer import Uniform
from portable.io.atomic import atomic_write_bytes
from portable.io.files import read_bytes
from portable.model import load_checkpoint
from portable.module.base_module import BaseModule, parse_data_desc
from portable.ndarray.ndarray import NDArray, array, zeros
from portable.optim import create as create_optimizer
from portable.optim import get_updater
from portable.optim.optimizer import Optimizer

# Optimizer-state files are bounded like any file we read.
MAX_STATES_BYTES = 1 << 32


def _check_input_names(symbol: Any, names: Sequence[str], typename: str, throw: bool) -> None:
    args = symbol.list_arguments()
    for name in names:
        if name in args:
            continue
        candidates = [a for a in args if not a.endswith(("_weight", "_bias", "_gamma", "_beta"))]
        msg = (f"You created Module with Module(..., {typename}_names={list(names)}) but input "
               f"with name {name!r} is not found in symbol.list_arguments(). Did you mean one "
               f"of: {candidates}")
        if throw:
            raise BindError(msg)
        warnings.warn(msg, stacklevel=3)


class Module(BaseModule):
    """A symbol with its parameters, executor and optimizer.

    Args:
        symbol: the network (its outputs are the module's outputs).
        data_names, label_names: the symbol's input arguments fed from data batches.
        logger: where ``fit`` logs.
        context: a device or a list of them (the first is used).
        fixed_param_names: parameters never updated.
        state_names: further inputs that are neither data nor parameters.
    """

    def __init__(self, symbol: Any, data_names: Sequence[str] = ("data",),
                 label_names: Sequence[str] | None = ("softmax_label",), logger: Any = logging,
                 context: Any = None, work_load_list: Any = None,
                 fixed_param_names: Sequence[str] | None = None,
                 state_names: Sequence[str] | None = None, group2ctxs: Any = None,
                 compression_params: Any = None) -> None:
        super().__init__(logger=logger)
        contexts = context if isinstance(context, (list, tuple)) else [context]
        self._context = [as_device(c) for c in contexts] or [as_device(None)]
        self._symbol = symbol
        data_names = list(data_names) if data_names is not None else []
        label_names = list(label_names) if label_names is not None else []
        state_names = list(state_names) if state_names is not None else []
        fixed = list(fixed_param_names) if fixed_param_names is not None else []
        _check_input_names(symbol, data_names, "data", True)
        _check_input_names(symbol, label_names, "label", False)
        _check_input_names(symbol, state_names, "state", True)
        _check_input_names(symbol, fixed, "fixed_param", True)
        input_names = data_names + label_names + state_names
        self._param_names = [x for x in symbol.list_arguments() if x not in input_names]
        self._fixed_param_names = fixed
        self._aux_names = symbol.list_auxiliary_states()
        self._data_names = data_names
        self._label_names = label_names
        self._state_names = state_names
        self._output_names = symbol.list_outputs()
        self._arg_params: dict[str, NDArray] | None = None
        self._aux_params: dict[str, NDArray] | None = None
        self._params_dirty = False
        self._optimizer: Optimizer | None = None
        self._updater: Any = None
        self._preload_opt_states: str | None = None
        self._grad_req: Any = None
        self._exec: Any = None
        self._data_shapes: list | None = None
        self._label_shapes: list | None = None

    # -- checkpoints -----------------------------------------------------------------------
    @staticmethod
    def load(prefix: str, epoch: int, load_optimizer_states: bool = False,
             **kwargs: Any) -> "Module":
        """A Module from ``prefix-symbol.json`` and ``prefix-%04d.params`` (parameters are
        assigned at bind); ``kwargs`` go to the constructor.

        Example:
            >>> mod = Module.load("mlp", 3, context=mx.cpu())  # doctest: +SKIP
        """
        sym, args, auxs = load_checkpoint(prefix, epoch)
        mod = Module(symbol=sym, **kwargs)
        mod._arg_params = args
        mod._aux_params = auxs
        mod.params_initialized = True
        if load_optimizer_states:
            mod._preload_opt_states = "%s-%04d.states" % (prefix, epoch)
        return mod

    def save_checkpoint(self, prefix: str, epoch: int, save_optimizer_states: bool = False,
                        remove_amp_cast: bool = True) -> None:
        """Write ``prefix-symbol.json``, ``prefix-%04d.params`` (and ``.states``)."""
        self._symbol.save(f"{prefix}-symbol.json")
        param_name = "%s-%04d.params" % (prefix, epoch)
        self.save_params(param_name)
        logging.info('Saved checkpoint to "%s"', param_name)
        if save_optimizer_states:
            state_name = "%s-%04d.states" % (prefix, epoch)
            self.save_optimizer_states(state_name)
            logging.info('Saved optimizer state to "%s"', state_name)

    # -- names and shapes ------------------------------------------------------------------
    @property
    def data_names(self) -> list[str]:
        return self._data_names

    @property
    def label_names(self) -> list[str]:
        return self._label_names

    @property
    def output_names(self) -> list[str]:
        return self._output_names

    def _require_bound(self, what: str) -> None:
        if not self.binded:
            raise BindError(f"{what}: the module is not bound; call bind() first")

    @property
    def data_shapes(self) -> list:
        self._require_bound("data_shapes")
        return self._data_shapes

    @property
    def label_shapes(self) -> list | None:
        self._require_bound("label_shapes")
        return self._label_shapes

    @property
    def output_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        self._require_bound("output_shapes")
        shapes = {d.name: d.shape for d in self._data_shapes + (self._label_shapes or [])}
        _, outs, _ = self._symbol.infer_shape(**shapes)
        return list(zip(self._output_names, [tuple(s) for s in outs]))

    # -- parameters ------------------------------------------------------------------------
    def get_params(self) -> tuple[dict[str, NDArray], dict[str, NDArray]]:
        """``(arg_params, aux_params)``: the module's copies, synchronised from the
        executor."""
        if not self.params_initialized:
            raise BindError("get_params: parameters are not initialized")
        if self._params_dirty:
            self._sync_params_from_devices()
        return self._arg_params, self._aux_params

    def init_params(self, initializer: Any = Uniform(0.01), arg_params: dict | None = None,
                    aux_params: dict | None = None, allow_missing: bool = False,
                    force_init: bool = False, allow_extra: bool = False) -> None:
        """Initialise the parameters: from ``arg_params``/``aux_params`` where given (a name
        missing there is an error unless ``allow_missing``), else with ``initializer``."""
        if self.params_initialized and not force_init:
            warnings.warn("Parameters already initialized and force_init=False. "
                          "init_params call ignored.", stacklevel=2)
            return
        self._require_bound("init_params")

        def _impl(name: str, arr: NDArray, cache: dict | None) -> None:
            if cache is not None:
                if name in cache:
                    if cache[name] is not arr:
                        arr[:] = cache[name]
                    return
                if not allow_missing:
                    raise BindError(f"init_params: {name!r} is not presented")
            if initializer is not None:
                initializer(name, arr)

        for name, arr in sorted(self._arg_params.items()):
            _impl(name, arr, arg_params)
        for name, arr in sorted(self._aux_params.items()):
            _impl(name, arr, aux_params)
        self.params_initialized = True
        self._params_dirty = False
        self._copy_params_to_executor(allow_extra)

    def set_params(self, arg_params: dict, aux_params: dict, allow_missing: bool = False,
                   force_init: bool = True, allow_extra: bool = False) -> None:
        """Assign parameter values (to the executor directly with ``allow_missing``)."""
        if not allow_missing:
            self.init_params(initializer=None, arg_params=arg_params, aux_params=aux_params,
                             allow_missing=allow_missing, force_init=force_init,
                             allow_extra=allow_extra)
            return
        if self.params_initialized and not force_init:
            warnings.warn("Parameters already initialized and force_init=False. "
                          "set_params call ignored.", stacklevel=2)
            return
        self._exec.copy_params_from(arg_params, aux_params, allow_extra_params=allow_extra)
        self._params_dirty = True
        self.params_initialized = True

    def _copy_params_to_executor(self, allow_extra: bool = False) -> None:
        self._exec.copy_params_from(self._arg_params, self._aux_params,
                                    allow_extra_params=allow_extra)

    def _sync_params_from_devices(self) -> None:
        for name, arr in self._arg_params.items():
            arr[:] = self._exec.arg_dict[name]
        for name, arr in self._aux_params.items():
            arr[:] = self._exec.aux_dict[name]
        self._params_dirty = False

    # -- binding ---------------------------------------------------------------------------
    def bind(self, data_shapes: Any, label_shapes: Any = None, for_training: bool = True,
             inputs_need_grad: bool = False, force_rebind: bool = False,
             shared_module: Any = None, grad_req: Any = "write") -> None:
        """Allocate the executor for these input shapes (``[(name, shape)]`` or DataDescs)."""
        if force_rebind:
            self._reset_bind()
        if self.binded:
            self.logger.warning("Already bound, ignoring bind()")
            return
        if not for_training and inputs_need_grad:
            raise BindError("bind: inputs_need_grad needs for_training=True")
        if shared_module is not None:
            raise PortableError("bind: shared_module is not supported")
        self.for_training = for_training
        self.inputs_need_grad = inputs_need_grad
        self._grad_req = grad_req
        self._data_shapes, self._label_shapes = parse_data_desc(
            self._data_names, self._label_names, data_shapes, label_shapes)
        self._exec = self._bind_executor(None)
        if self.params_initialized:
            self._copy_params_to_executor(allow_extra=True)
        else:
            self._arg_params = {n: zeros(self._exec.arg_dict[n].shape, self._context[0],
                                         self._exec.arg_dict[n].dtype)
                                for n in self._param_names}
            self._aux_params = {n: zeros(self._exec.aux_dict[n].shape, self._context[0],
                                         self._exec.aux_dict[n].dtype)
                                for n in self._aux_names}
        self.binded = True

    def _reset_bind(self) -> None:
        self.binded = False
        self._exec = None
        self._data_shapes = None
        self._label_shapes = None

    def _grad_reqs(self) -> dict[str, str]:
        reqs = {}
        for name in self._symbol.list_arguments():
            if not self.for_training:
                req = "null"
            elif name in self._param_names:
                if name in self._fixed_param_names:
                    req = "null"
                elif isinstance(self._grad_req, dict):
                    req = self._grad_req.get(name, "write")
                else:
                    req = self._grad_req
            elif name in self._data_names:
                req = self._grad_req if self.inputs_need_grad and isinstance(
                    self._grad_req, str) else ("write" if self.inputs_need_grad else "null")
            else:
                req = "null"  # labels and states
            reqs[name] = req
        return reqs

    def _bind_executor(self, previous: Any) -> Any:
        """Bind the symbol for the current shapes; parameters, their gradients and the
        auxiliary states are ``previous``'s arrays when there is one."""
        descs = self._data_shapes + (self._label_shapes or [])
        args = set(self._symbol.list_arguments())
        shapes = {d.name: tuple(d.shape) for d in descs if d.name in args}
        types = {d.name: d.dtype for d in descs if d.name in args}
        info = self._symbol._infer(shapes, types)
        device = self._context[0]
        reqs = self._grad_reqs()
        arg_arrays, grad_arrays, aux_arrays = {}, {}, {}
        for name in self._symbol.list_arguments():
            type_ = info.types[name]
            if previous is not None and name in self._param_names:
                arg_arrays[name] = previous.arg_dict[name]
                if name in previous.grad_dict:
                    grad_arrays[name] = previous.grad_dict[name]
                continue
            arg_arrays[name] = zeros(type_.shape, device, type_.dtype)
            if reqs[name] != "null":
                grad_arrays[name] = zeros(type_.shape, device, type_.dtype)
        for name in self._aux_names:
            type_ = info.types[name]
            aux_arrays[name] = (previous.aux_dict[name] if previous is not None
                                else zeros(type_.shape, device, type_.dtype))
        return self._symbol.bind(device, arg_arrays, grad_arrays, reqs, aux_arrays)

    def reshape(self, data_shapes: Any, label_shapes: Any = None) -> None:
        """Rebind for new input shapes, keeping the parameters."""
        self._require_bound("reshape")
        self._data_shapes, self._label_shapes = parse_data_desc(
            self._data_names, self._label_names, data_shapes, label_shapes)
        self._exec = self._bind_executor(self._exec)

    # -- optimizer -------------------------------------------------------------------------
    def init_optimizer(self, kvstore: Any = "local", optimizer: Any = "sgd",
                       optimizer_params: Any = (("learning_rate", 0.01),),
                       force_init: bool = False) -> None:
        """Create the optimizer (``rescale_grad`` defaults to 1 / batch size) and updater."""
        if not (self.binded and self.params_initialized):
            raise BindError("init_optimizer: call bind() and init_params() first")
        if self.optimizer_initialized and not force_init:
            self.logger.warning("optimizer already initialized, ignoring...")
            return
        if isinstance(kvstore, str) and "dist" in kvstore:
            raise PortableError(f"Module: kvstore {kvstore!r} is not supported; the module "
                                f"trains on one device (use 'local')")
        if self._params_dirty:
            self._sync_params_from_devices()
        batch_size = self._data_shapes[0].shape[
            max(self._data_shapes[0].get_batch_axis(getattr(self._data_shapes[0], "layout",
                                                            None)), 0)]
        rescale_grad = 1.0 / batch_size
        idx2name = dict(enumerate(self._param_names))
        if isinstance(optimizer, str):
            optimizer_params = dict(optimizer_params)
            optimizer_params.setdefault("rescale_grad", rescale_grad)
            optimizer = create_optimizer(optimizer, param_idx2name=idx2name,
                                         **optimizer_params)
        else:
            if not isinstance(optimizer, Optimizer):
                raise PortableError(f"init_optimizer: optimizer must be a name or an "
                                    f"Optimizer, got {type(optimizer).__name__}")
            if optimizer.rescale_grad != rescale_grad:
                warnings.warn("Optimizer created manually outside Module but rescale_grad is "
                              f"not normalized to 1.0/batch_size ({optimizer.rescale_grad} vs. "
                              f"{rescale_grad}). Is this intended?", stacklevel=2)
            if not optimizer.idx2name:
                optimizer.idx2name = idx2name.copy()
        self._optimizer = optimizer
        self._updater = get_updater(optimizer)
        self.optimizer_initialized = True
        if self._preload_opt_states is not None:
            self.load_optimizer_states(self._preload_opt_states)
            self._preload_opt_states = None

    def save_optimizer_states(self, fname: str) -> None:
        """Write the updater's states (safetensors with a JSON header; no pickle)."""
        if not self.optimizer_initialized:
            raise BindError("save_optimizer_states: the optimizer is not initialized")
        atomic_write_bytes(fname, self._updater.get_states())

    def load_optimizer_states(self, fname: str) -> None:
        if not self.optimizer_initialized:
            raise BindError("load_optimizer_states: the optimizer is not initialized")
        self._updater.set_states(read_bytes(fname, "optimizer states", MAX_STATES_BYTES),
                                 source=fname)
        self._optimizer = self._updater.optimizer

    # -- computation -----------------------------------------------------------------------
    def forward(self, data_batch: Any, is_train: bool | None = None) -> None:
        """Copy the batch into the executor (rebinding for a new shape) and run forward;
        ``is_train`` defaults to ``for_training``."""
        self._require_ready("forward")
        new_shapes = tuple(tuple(d.shape) for d in data_batch.data)
        if new_shapes != tuple(tuple(d.shape) for d in self._data_shapes):
            self._reshape_for(data_batch, new_shapes)
        if is_train is None:
            is_train = self.for_training
        feeds = dict(zip(self._data_names, data_batch.data))
        if data_batch.label:
            feeds.update(zip(self._label_names, data_batch.label))
        for name, value in feeds.items():
            if name in self._exec.arg_dict:
                self._exec.arg_dict[name][:] = value
        self._exec.forward(is_train=bool(is_train))

    def _reshape_for(self, data_batch: Any, new_shapes: tuple) -> None:
        from portable.data.data_iter import DataDesc

        if getattr(data_batch, "provide_data", None):
            data_descs = data_batch.provide_data
        else:
            data_descs = [DataDesc(d.name, s, d.dtype, d.layout)
                          for d, s in zip(self._data_shapes, new_shapes)]
        if getattr(data_batch, "provide_label", None):
            label_descs = data_batch.provide_label
        elif data_batch.label and self._label_shapes:
            label_descs = [DataDesc(d.name, tuple(lab.shape), d.dtype, d.layout)
                           for d, lab in zip(self._label_shapes, data_batch.label)]
        else:
            label_descs = None
        self.reshape(data_descs, label_descs)

    def backward(self, out_grads: Any = None) -> None:
        """Gradients of the last training forward (loss outputs need no ``out_grads``)."""
        self._require_ready("backward")
        self._exec.backward(out_grads=out_grads)

    def update(self) -> None:
        """Apply the optimizer to every parameter that has a gradient."""
        if not (self.binded and self.params_initialized and self.optimizer_initialized):
            raise BindError("update: call bind(), init_params() and init_optimizer() first")
        self._params_dirty = True
        for index, name in enumerate(self._param_names):
            grad = self._exec.grad_dict.get(name)
            if grad is None or self._exec.grad_req.get(name) == "null":
                continue
            self._updater(index, grad, self._exec.arg_dict[name])

    def get_outputs(self, merge_multi_context: bool = True) -> list[NDArray]:
        self._require_ready("get_outputs")
        return list(self._exec.outputs)

    def get_input_grads(self, merge_multi_context: bool = True) -> list[NDArray]:
        self._require_ready("get_input_grads")
        if not self.inputs_need_grad:
            raise BindError("get_input_grads: bind with inputs_need_grad=True")
        return [self._exec.grad_dict[name] for name in self._data_names]

    def update_metric(self, eval_metric: Any, labels: Any, pre_sliced: bool = False) -> None:
        """Update ``eval_metric`` with the labels and the last outputs, by name."""
        labels_ = OrderedDict(zip(self._label_names, labels or []))
        preds = OrderedDict(zip(self._output_names, self._exec.outputs))
        eval_metric.update_dict(labels_, preds)

    def get_states(self, merge_multi_context: bool = True) -> list[NDArray]:
        self._require_ready("get_states")
        return [self._exec.arg_dict[name] for name in self._state_names]

    def set_states(self, states: Any = None, value: Any = None) -> None:
        self._require_ready("set_states")
        for i, name in enumerate(self._state_names):
            if states is not None:
                self._exec.arg_dict[name][:] = states[i]
            else:
                self._exec.arg_dict[name][:] = array([value]).asnumpy()[0]
