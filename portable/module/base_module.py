"""``BaseModule``: MXNet 1.x's module interface and the loops written once on top of it:
``fit``, ``score``, ``predict``, ``iter_predict``, ``forward_backward`` and parameter files.

A subclass (``Module``) supplies bind / init_params / init_optimizer / forward / backward /
update / get_outputs / update_metric; the loops below call them in MXNet 1.9.1's order, with
its callbacks (``BatchEndParam``) and log lines.

Example:
    >>> mod = mx.mod.Module(net)                                         # doctest: +SKIP
    >>> mod.fit(train_iter, eval_data=val_iter, num_epoch=5)             # doctest: +SKIP
    >>> mod.score(val_iter, "acc")                                       # doctest: +SKIP
    [('accuracy', 0.97)]
"""
from __future__ import annotations

import logging
import time
from typing import Any, Iterator, Sequence

import numpy as np

from portable import metric as metrics
from portable.data.data_iter import DataBatch, DataDesc, DataIter
from portable.errors import BindError, PortableError
from portable.initializer import Uniform
from portable.io import mxnet_ndarray_format
from portable.model import BatchEndParam, save_params_file, split_params
from portable.ndarray.ndarray import NDArray, array
from portable.ndarray.functions import mxnet_aliases

_concatenate = mxnet_aliases()["concatenate"]


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _global_name_value(eval_metric: Any) -> list:
    """The metric over the whole epoch (``get_global_name_value`` where it has one)."""
    getter = getattr(eval_metric, "get_global_name_value", eval_metric.get_name_value)
    return getter()


def parse_data_desc(data_names: Sequence[str], label_names: Sequence[str], data_shapes: Any,
                    label_shapes: Any) -> tuple[list[DataDesc], list[DataDesc] | None]:
    """DataDescs from ``[(name, shape)]`` or DataDescs; the data names must be the module's.

    Raises:
        BindError: the data shapes name other inputs than ``data_names``.
    """
    data_shapes = [x if isinstance(x, DataDesc) else DataDesc(*x) for x in data_shapes]
    if sorted(data_names) != sorted(d.name for d in data_shapes):
        raise BindError(f"data shapes {[(d.name, d.shape) for d in data_shapes]} do not match "
                        f"the module's data_names {list(data_names)}")
    if label_shapes is not None:
        label_shapes = [x if isinstance(x, DataDesc) else DataDesc(*x) for x in label_shapes]
        if sorted(label_names) != sorted(d.name for d in label_shapes):
            logging.warning("label shapes %s do not match label_names %s",
                            [(d.name, d.shape) for d in label_shapes], list(label_names))
    return data_shapes, label_shapes


class BaseModule:
    """The module interface (MXNet's ``mx.module.BaseModule``)."""

    def __init__(self, logger: Any = logging) -> None:
        self.logger = logger
        self.binded = False
        self.for_training = False
        self.inputs_need_grad = False
        self.params_initialized = False
        self.optimizer_initialized = False
        self._symbol = None
        self._total_exec_bytes = 0

    # -- the loops -------------------------------------------------------------------------
    def forward_backward(self, data_batch: DataBatch) -> None:
        """A training forward pass, then backward."""
        self.forward(data_batch, is_train=True)
        self.backward()

    def _require_ready(self, what: str) -> None:
        if not (self.binded and self.params_initialized):
            raise BindError(f"{what}: call bind() and init_params() first")

    def score(self, eval_data: DataIter, eval_metric: Any, num_batch: int | None = None,
              batch_end_callback: Any = None, score_end_callback: Any = None,
              reset: bool = True, epoch: int = 0, sparse_row_id_fn: Any = None) -> list:
        """Run ``eval_data`` forward and return ``eval_metric``'s ``[(name, value)]``.

        Example:
            >>> mod.score(val_iter, ["acc", "ce"])  # doctest: +SKIP
        """
        self._require_ready("score")
        if reset:
            eval_data.reset()
        if not isinstance(eval_metric, metrics.EvalMetric):
            eval_metric = metrics.create(eval_metric)
        eval_metric.reset()
        actual_num_batch = 0
        for nbatch, eval_batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                break
            self.prepare(eval_batch, sparse_row_id_fn=sparse_row_id_fn)
            self.forward(eval_batch, is_train=False)
            self.update_metric(eval_metric, eval_batch.label)
            if batch_end_callback is not None:
                params = BatchEndParam(epoch=epoch, nbatch=nbatch, eval_metric=eval_metric,
                                       locals=locals())
                for callback in _as_list(batch_end_callback):
                    callback(params)
            actual_num_batch += 1
        if score_end_callback:
            params = BatchEndParam(epoch=epoch, nbatch=actual_num_batch,
                                   eval_metric=eval_metric, locals=locals())
            for callback in _as_list(score_end_callback):
                callback(params)
        return eval_metric.get_name_value()

    def iter_predict(self, eval_data: DataIter, num_batch: int | None = None,
                     reset: bool = True, sparse_row_id_fn: Any = None) -> Iterator[tuple]:
        """Yield ``(outputs without the pad rows, batch number, batch)`` per batch."""
        self._require_ready("iter_predict")
        if reset:
            eval_data.reset()
        for nbatch, eval_batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                break
            self.prepare(eval_batch, sparse_row_id_fn=sparse_row_id_fn)
            self.forward(eval_batch, is_train=False)
            pad = eval_batch.pad or 0
            outputs = [out[0:out.shape[0] - pad] for out in self.get_outputs()]
            yield outputs, nbatch, eval_batch

    def predict(self, eval_data: Any, num_batch: int | None = None, merge_batches: bool = True,
                reset: bool = True, always_output_list: bool = False,
                sparse_row_id_fn: Any = None) -> Any:
        """The outputs over ``eval_data`` (a DataIter, or one NDArray / NumPy batch), the pad
        rows of each batch dropped; merged into one array per output unless
        ``merge_batches=False``.

        Example:
            >>> mod.predict(val_iter).shape  # doctest: +SKIP
            (150, 10)
        """
        self._require_ready("predict")
        if isinstance(eval_data, (NDArray, np.ndarray)):
            if isinstance(eval_data, np.ndarray):
                eval_data = array(eval_data)
            self.forward(DataBatch([eval_data]))
            return self.get_outputs()[0]
        if not isinstance(eval_data, DataIter):
            raise PortableError("predict: eval_data must be an NDArray or a DataIter")
        if reset:
            eval_data.reset()
        output_list = []
        for nbatch, eval_batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                break
            self.prepare(eval_batch, sparse_row_id_fn=sparse_row_id_fn)
            self.forward(eval_batch, is_train=False)
            pad = eval_batch.pad or 0
            output_list.append([out[0:out.shape[0] - pad].copy()
                                for out in self.get_outputs()])
        if not output_list:
            return output_list
        if not merge_batches:
            return output_list
        num_outputs = len(output_list[0])
        if any(len(out) != num_outputs for out in output_list):
            raise PortableError("predict: cannot merge batches with different numbers of "
                                "outputs; use merge_batches=False")
        merged = [_concatenate([out[i] for out in output_list]) for i in range(num_outputs)]
        if num_outputs == 1 and not always_output_list:
            return merged[0]
        return merged

    def fit(self, train_data: DataIter, eval_data: DataIter | None = None,
            eval_metric: Any = "acc", epoch_end_callback: Any = None,
            batch_end_callback: Any = None, kvstore: Any = "local", optimizer: Any = "sgd",
            optimizer_params: Any = (("learning_rate", 0.01),), eval_end_callback: Any = None,
            eval_batch_end_callback: Any = None, initializer: Any = Uniform(0.01),
            arg_params: dict | None = None, aux_params: dict | None = None,
            allow_missing: bool = False, force_rebind: bool = False, force_init: bool = False,
            begin_epoch: int = 0, num_epoch: int | None = None, validation_metric: Any = None,
            monitor: Any = None, sparse_row_id_fn: Any = None) -> None:
        """Train for epochs ``begin_epoch .. num_epoch - 1`` (MXNet's ``Module.fit``): bind,
        initialise the parameters and the optimizer, then per batch forward, backward, update
        and the metric; after each epoch log ``Train-<metric>``, call the epoch callbacks with
        the parameters, score ``eval_data`` and reset ``train_data``.

        Example:
            >>> mod.fit(train_iter, num_epoch=10, optimizer_params={"learning_rate": 0.1})
            ... # doctest: +SKIP
        """
        if num_epoch is None:
            raise PortableError("fit: please specify number of epochs (num_epoch)")
        self.bind(data_shapes=train_data.provide_data, label_shapes=train_data.provide_label,
                  for_training=True, force_rebind=force_rebind)
        if monitor is not None:
            self.install_monitor(monitor)
        self.init_params(initializer=initializer, arg_params=arg_params, aux_params=aux_params,
                         allow_missing=allow_missing, force_init=force_init)
        self.init_optimizer(kvstore=kvstore, optimizer=optimizer,
                            optimizer_params=optimizer_params)
        if validation_metric is None:
            validation_metric = eval_metric
        if not isinstance(eval_metric, metrics.EvalMetric):
            eval_metric = metrics.create(eval_metric)
        for epoch in range(begin_epoch, num_epoch):
            tic = time.time()
            eval_metric.reset()
            nbatch = 0
            data_iter = iter(train_data)
            end_of_batch = False
            next_data_batch = next(data_iter)
            eval_name_vals: list = []
            while not end_of_batch:
                data_batch = next_data_batch
                self.forward_backward(data_batch)
                self.update()
                self.update_metric(eval_metric, data_batch.label)
                try:
                    next_data_batch = next(data_iter)
                    self.prepare(next_data_batch, sparse_row_id_fn=sparse_row_id_fn)
                except StopIteration:
                    end_of_batch = True
                if end_of_batch:
                    eval_name_vals = _global_name_value(eval_metric)
                if batch_end_callback is not None:
                    params = BatchEndParam(epoch=epoch, nbatch=nbatch, eval_metric=eval_metric,
                                           locals=locals())
                    for callback in _as_list(batch_end_callback):
                        callback(params)
                nbatch += 1
            for name, val in eval_name_vals:
                self.logger.info("Epoch[%d] Train-%s=%f", epoch, name, val)
            self.logger.info("Epoch[%d] Time cost=%.3f", epoch, time.time() - tic)
            arg_params_now, aux_params_now = self.get_params()
            self.set_params(arg_params_now, aux_params_now)
            if epoch_end_callback is not None:
                for callback in _as_list(epoch_end_callback):
                    callback(epoch, self.symbol, arg_params_now, aux_params_now)
            if eval_data is not None:
                res = self.score(eval_data, validation_metric,
                                 score_end_callback=eval_end_callback,
                                 batch_end_callback=eval_batch_end_callback, epoch=epoch)
                for name, val in res:
                    self.logger.info("Epoch[%d] Validation-%s=%f", epoch, name, val)
            train_data.reset()

    # -- parameters ------------------------------------------------------------------------
    def set_params(self, arg_params: dict, aux_params: dict, allow_missing: bool = False,
                   force_init: bool = True, allow_extra: bool = False) -> None:
        """Assign parameter values (MXNet: ``init_params`` without an initializer)."""
        self.init_params(initializer=None, arg_params=arg_params, aux_params=aux_params,
                         allow_missing=allow_missing, force_init=force_init,
                         allow_extra=allow_extra)

    def save_params(self, fname: str) -> None:
        """Write the parameters to ``fname`` in MXNet's format (keys ``arg:``/``aux:``)."""
        arg_params, aux_params = self.get_params()
        save_params_file(fname, arg_params, aux_params)

    def load_params(self, fname: str) -> None:
        """Read parameters written by ``save_params`` (or MXNet) and assign them."""
        arg_params, aux_params = split_params(mxnet_ndarray_format.read(fname), fname)
        self.set_params(arg_params, aux_params)

    def prepare(self, data_batch: DataBatch, sparse_row_id_fn: Any = None) -> None:
        """Get ready for ``data_batch`` (nothing to do for dense parameters on one device)."""

    def install_monitor(self, mon: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__}: monitors are not supported")

    @property
    def symbol(self) -> Any:
        return self._symbol

    # -- the interface subclasses implement ------------------------------------------------
    def get_params(self) -> tuple[dict, dict]:
        raise NotImplementedError

    def init_params(self, initializer: Any = Uniform(0.01), arg_params: dict | None = None,
                    aux_params: dict | None = None, allow_missing: bool = False,
                    force_init: bool = False, allow_extra: bool = False) -> None:
        raise NotImplementedError

    def bind(self, data_shapes: Any, label_shapes: Any = None, for_training: bool = True,
             inputs_need_grad: bool = False, force_rebind: bool = False,
             shared_module: Any = None, grad_req: Any = "write") -> None:
        raise NotImplementedError

    def init_optimizer(self, kvstore: Any = "local", optimizer: Any = "sgd",
                       optimizer_params: Any = (("learning_rate", 0.01),),
                       force_init: bool = False) -> None:
        raise NotImplementedError

    def forward(self, data_batch: DataBatch, is_train: bool | None = None) -> None:
        raise NotImplementedError

    def backward(self, out_grads: Any = None) -> None:
        raise NotImplementedError

    def update(self) -> None:
        raise NotImplementedError

    def update_metric(self, eval_metric: Any, labels: Any, pre_sliced: bool = False) -> None:
        raise NotImplementedError

    def get_outputs(self, merge_multi_context: bool = True) -> list:
        raise NotImplementedError


__all__ = ["BaseModule", "parse_data_desc"]
