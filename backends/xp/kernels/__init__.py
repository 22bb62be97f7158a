"""The NumPy kernel table, gathered from one module per op family."""
from __future__ import annotations

from backends.xp.kernels import (conv, custom, elementwise, fused, indexing, layout, linalg,
                                    loss, movement, nn, optim, quantize, reduce, resize, rnn)
from backends.xp.kernels import mxnet_outputs

kernels: dict = {}
for _family in (conv, custom, elementwise, fused, indexing, layout, linalg, loss, movement, nn,
                optim, quantize, reduce, resize, rnn, mxnet_outputs):
    _clash = kernels.keys() & _family.kernels.keys()
    if _clash:
        raise ValueError(f"kernels registered by two families: {sorted(_clash)}")
    kernels.update(_family.kernels)
