"""MXNet 1.x's training callbacks (``mx.callback``): ``Speedometer``, ``do_checkpoint``,
``module_checkpoint``, ``log_train_metric``, ``ProgressBar`` and
``LogValidationMetricsCallback``, logging the lines MXNet logs.

Batch callbacks receive a ``BatchEndParam(epoch, nbatch, eval_metric, locals)``; epoch
callbacks ``(epoch, symbol, arg_params, aux_params)``.

Example:
    >>> import portable as mx                                           # doctest: +SKIP
    >>> mod.fit(train, num_epoch=2, batch_end_callback=mx.callback.Speedometer(32, 10),
    ...         epoch_end_callback=mx.callback.do_checkpoint("mlp"))  # doctest: +SKIP
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable

from portable.model import save_checkpoint

__all__ = ["LogValidationMetricsCallback", "ProgressBar", "Speedometer", "do_checkpoint",
           "log_train_metric", "module_checkpoint"]


def _reset_local(metric: Any) -> None:
    """Forget the metric's values since the last report (``reset_local`` where it has one)."""
    getattr(metric, "reset_local", metric.reset)()


def module_checkpoint(mod: Any, prefix: str, period: int = 1,
                      save_optimizer_states: bool = False) -> Callable[..., None]:
    """An epoch-end callback: ``mod.save_checkpoint(prefix, epoch + 1)`` every ``period``."""
    period = int(max(1, period))

    def _callback(iter_no: int, sym: Any = None, arg: Any = None, aux: Any = None) -> None:
        if (iter_no + 1) % period == 0:
            mod.save_checkpoint(prefix, iter_no + 1, save_optimizer_states)
    return _callback


def do_checkpoint(prefix: str, period: int = 1) -> Callable[..., None]:
    """An epoch-end callback writing ``prefix-symbol.json`` and ``prefix-<epoch+1>.params``
    every ``period`` epochs.

    Example:
        >>> cb = do_checkpoint("/tmp/mlp", period=2)  # doctest: +SKIP
    """
    period = int(max(1, period))

    def _callback(iter_no: int, sym: Any, arg: Any, aux: Any) -> None:
        if (iter_no + 1) % period == 0:
            save_checkpoint(prefix, iter_no + 1, sym, arg, aux)
    return _callback


def log_train_metric(period: int, auto_reset: bool = False) -> Callable[[Any], None]:
    """A batch-end callback logging the training metric every ``period`` batches."""
    def _callback(param: Any) -> None:
        if param.nbatch % period == 0 and param.eval_metric is not None:
            for name, value in param.eval_metric.get_name_value():
                logging.info("Iter[%d] Batch[%d] Train-%s=%f", param.epoch, param.nbatch,
                             name, value)
            if auto_reset:
                _reset_local(param.eval_metric)
    return _callback


class Speedometer:
    """A batch-end callback logging samples per second (and the metric) every ``frequent``
    batches, as MXNet's ``Speedometer`` does.

    Args:
        batch_size: examples per batch.
        frequent: how many batches between log lines.
        auto_reset: reset the metric after each line (the line then covers those batches).
    """

    def __init__(self, batch_size: int, frequent: int = 50, auto_reset: bool = True) -> None:
        self.batch_size = batch_size
        self.frequent = frequent
        self.init = False
        self.tic = 0.0
        self.last_count = 0
        self.auto_reset = auto_reset

    def __call__(self, param: Any) -> None:
        count = param.nbatch
        if self.last_count > count:
            self.init = False  # a new epoch
        self.last_count = count
        if not self.init:
            self.init = True
            self.tic = time.time()
            return
        if count % self.frequent != 0:
            return
        try:
            speed = self.frequent * self.batch_size / (time.time() - self.tic)
        except ZeroDivisionError:
            speed = float("inf")
        if param.eval_metric is not None:
            name_value = param.eval_metric.get_name_value()
            values = sum(map(tuple, name_value), ())
            if self.auto_reset:
                _reset_local(param.eval_metric)
                msg = "Epoch[%d] Batch [%d-%d]\tSpeed: %.2f samples/sec" + "\t%s=%f" * len(
                    name_value)
                logging.info(msg, param.epoch, count - self.frequent, count, speed, *values)
            else:
                msg = "Epoch[%d] Batch [0-%d]\tSpeed: %.2f samples/sec" + "\t%s=%f" * len(
                    name_value)
                logging.info(msg, param.epoch, count, speed, *values)
        else:
            logging.info("Iter[%d] Batch [%d]\tSpeed: %.2f samples/sec", param.epoch, count,
                         speed)
        self.tic = time.time()


class ProgressBar:
    """A batch-end callback logging a text progress bar out of ``total`` batches."""

    def __init__(self, total: int, length: int = 80) -> None:
        self.bar_len = length
        self.total = total

    def __call__(self, param: Any) -> None:
        count = param.nbatch
        filled_len = int(round(self.bar_len * count / float(self.total)))
        percents = math.ceil(100.0 * count / float(self.total))
        prog_bar = "=" * filled_len + "-" * (self.bar_len - filled_len)
        logging.info("[%s] %s%s\r", prog_bar, percents, "%")


class LogValidationMetricsCallback:
    """An eval-end callback logging each validation metric."""

    def __call__(self, param: Any) -> None:
        if not param.eval_metric:
            return
        for name, value in param.eval_metric.get_name_value():
            logging.info("Epoch[%d] Validation-%s=%f", param.epoch, name, value)
