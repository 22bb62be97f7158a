"""Gluon: the imperative/hybrid model API of MXNet 1.x (``portable.gluon``).

Blocks hold Parameters and child blocks; a HybridBlock can be ``hybridize()``d into a graph
compiled once per input signature and run as one engine op (see ``portable.gluon.cached_op``).

Example:
    >>> import portable as pt
    >>> from portable import gluon
    >>> net = gluon.nn.HybridSequential()
    >>> net.add(gluon.nn.Dense(16, activation="relu"), gluon.nn.Dense(10))
    >>> net.initialize(pt.init.Xavier()); net.hybridize()
    >>> with pt.autograd.record():
    ...     loss = gluon.loss.SoftmaxCrossEntropyLoss()(net(pt.nd.ones((4, 8))),
    ...                                                 pt.nd.array([0, 1, 2, 3]))
    >>> loss.backward()
"""
from __future__ import annotations

import importlib
from typing import Any

from portable.gluon import loss, nn, rnn, utils
from portable.gluon.block import Block, HybridBlock
from portable.gluon.parameter import Constant, DeferredInitializationError, Parameter
from portable.gluon.parameter_dict import ParameterDict
from portable.gluon.symbol_block import SymbolBlock

__all__ = ["Block", "Constant", "DeferredInitializationError", "HybridBlock", "Parameter",
           "ParameterDict", "SymbolBlock", "loss", "nn", "rnn", "utils"]

try:  # the Trainer is written separately; expose it once it exists
    from portable.gluon.trainer import Trainer  # noqa: F401
except ImportError as _exc:
    if _exc.name != "portable.gluon.trainer":
        raise
else:
    __all__.append("Trainer")


# Subpackages imported on first use (MXNet's gluon.model_zoo and gluon.contrib).
_LAZY = {"model_zoo": "portable.gluon.model_zoo", "contrib": "portable.gluon.contrib"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        globals()[name] = module
        return module
    # gluon.data: portable.gluon.data when it exists, else portable.data once it provides the
    # Gluon data API (Dataset/DataLoader); imported on first use.
    if name != "data":
        raise AttributeError(f"module 'portable.gluon' has no attribute {name!r}")
    try:
        module = importlib.import_module("portable.gluon.data")
    except ModuleNotFoundError as exc:
        if exc.name != "portable.gluon.data":
            raise
        module = importlib.import_module("portable.data")
        if not hasattr(module, "DataLoader"):
            raise AttributeError("portable.gluon.data is not available yet: neither "
                                 "portable.gluon.data nor a DataLoader in portable.data "
                                 "exists") from None
    globals()[name] = module
    return module
