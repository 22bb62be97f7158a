"""MXNet 1.x's module API (``mx.mod``): ``BaseModule`` and ``Module``.

Example:
    >>> import portable as mx                                     # doctest: +SKIP
    >>> mod = mx.mod.Module(net, context=mx.cpu())                # doctest: +SKIP
    >>> mod.fit(train_iter, num_epoch=5)                          # doctest: +SKIP
"""
from portable.module.base_module import BaseModule
from portable.module.module import Module

__all__ = ["BaseModule", "Module"]
