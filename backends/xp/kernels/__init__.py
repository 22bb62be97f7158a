"""The NumPy kernel table, gathered from one module per op family."""
from __future__ import annotations

from backends.xp.kernels import (conv, elementwise, fused, indexing, layout, linalg, loss,
                                    movement, nn, optim, quantize, reduce, resize, rnn)

kernels: dict = {}
for _family in (conv, elementwise, fused, indexing, layout, linalg, loss, movement, nn, optim,
                quantize, reduce, resize, rnn):
    _clash = kernels.keys() & _family.kernels.keys()
    if _clash:
        raise ValueError(f"kernels registered by two families: {sorted(_clash)}")
    kernels.update(_family.kernels)
