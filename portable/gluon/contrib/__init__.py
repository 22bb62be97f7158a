"""``gluon.contrib`` (MXNet 1.x): extra layers in ``gluon.contrib.nn``.

Example:
    >>> import portable as mx
    >>> from portable.gluon import contrib
    >>> contrib.nn.PixelShuffle2D(2)(mx.nd.ones((1, 8, 3, 3))).shape
    (1, 2, 6, 6)
"""
from portable.gluon.contrib import nn

__all__ = ["nn"]
