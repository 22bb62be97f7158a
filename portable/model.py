"""MXNet 1.x's ``mx.model`` checkpoint functions: ``save_checkpoint``, ``load_checkpoint``,
``load_params`` and the ``BatchEndParam`` record that batch callbacks receive.

A checkpoint is ``<prefix>-symbol.json`` (the symbol) and ``<prefix>-<epoch:04d>.params``, the
parameters in MXNet's binary NDArray format with keys ``arg:<name>`` and ``aux:<name>``, so
MXNet itself can read the parameters back.

Example:
    >>> import portable as mx                                          # doctest: +SKIP
    >>> mx.model.save_checkpoint("mlp", 3, net, arg_params, aux_params)  # doctest: +SKIP
    >>> sym, arg_params, aux_params = mx.model.load_checkpoint("mlp", 3)  # doctest: +SKIP
"""
from __future__ import annotations

import logging
from collections import namedtuple
from typing import Any, Mapping

from portable.errors import SerializationError
from portable.io import mxnet_ndarray_format
from portable.ndarray.ndarray import NDArray, array
from portable.symbol import load as load_symbol

__all__ = ["BatchEndParam", "load_checkpoint", "load_params", "params_path", "save_checkpoint",
           "save_params_file", "split_params", "symbol_path"]

# What a batch-end callback receives (MXNet's field names).
BatchEndParam = namedtuple("BatchEndParams", ["epoch", "nbatch", "eval_metric", "locals"])


def symbol_path(prefix: str) -> str:
    return f"{prefix}-symbol.json"


def params_path(prefix: str, epoch: int) -> str:
    return "%s-%04d.params" % (prefix, int(epoch))


def save_params_file(path: str, arg_params: Mapping[str, Any],
                     aux_params: Mapping[str, Any]) -> None:
    """Write ``arg:``/``aux:`` parameters to ``path`` in MXNet's NDArray file format.

    Args:
        path: the file (written atomically).
        arg_params, aux_params: name -> NDArray (or NumPy array).
    """
    named = {f"arg:{k}": _host(v) for k, v in arg_params.items()}
    named.update({f"aux:{k}": _host(v) for k, v in aux_params.items()})
    mxnet_ndarray_format.write(path, named)


def split_params(named: Any, source: str) -> tuple[dict[str, NDArray], dict[str, NDArray]]:
    """``(arg_params, aux_params)`` from ``(key, array)`` pairs keyed ``arg:``/``aux:``.

    Raises:
        SerializationError: an entry has no name or a prefix other than arg/aux.
    """
    arg_params: dict[str, NDArray] = {}
    aux_params: dict[str, NDArray] = {}
    for key, value in named:
        kind, _, name = (key or "").partition(":")
        if kind not in ("arg", "aux") or not name:
            raise SerializationError(f"{source}: entry {key!r} is not named 'arg:<name>' or "
                                     f"'aux:<name>'; not a parameter file")
        target = arg_params if kind == "arg" else aux_params
        target[name] = array(value, dtype=value.dtype)
    return arg_params, aux_params


def _host(value: Any):
    return value.asnumpy() if isinstance(value, NDArray) else value


def save_checkpoint(prefix: str, epoch: int, symbol: Any, arg_params: Mapping[str, Any],
                    aux_params: Mapping[str, Any], remove_amp_cast: bool = True) -> None:
    """Write ``prefix-symbol.json`` (when ``symbol`` is given) and ``prefix-%04d.params``.

    Args:
        prefix: the path prefix.
        epoch: the epoch number in the parameter file's name.
        symbol: the network, or None to write only the parameters.
        arg_params, aux_params: name -> NDArray.
        remove_amp_cast: accepted for MXNet compatibility.
    """
    if symbol is not None:
        symbol.save(symbol_path(prefix))
    path = params_path(prefix, epoch)
    save_params_file(path, arg_params, aux_params)
    logging.info('Saved checkpoint to "%s"', path)


def load_params(prefix: str, epoch: int) -> tuple[dict[str, NDArray], dict[str, NDArray]]:
    """``(arg_params, aux_params)`` from ``prefix-%04d.params``."""
    path = params_path(prefix, epoch)
    named = mxnet_ndarray_format.read(path)
    if not named:
        logging.warning("Params file '%s' is empty", path)
    return split_params(named, path)


def load_checkpoint(prefix: str, epoch: int) -> tuple[Any, dict, dict]:
    """``(symbol, arg_params, aux_params)`` written by ``save_checkpoint`` (or by MXNet).

    Example:
        >>> sym, args, auxs = load_checkpoint("mlp", 3)  # doctest: +SKIP
    """
    return load_symbol(symbol_path(prefix)), *load_params(prefix, epoch)
