"""The OpenCL kernel table, gathered from one module per op family."""
from __future__ import annotations

from backends.opencl.kernels import (conv, custom, elementwise, fused, indexing, layout, linalg,
                                     loss, movement, mxnet_outputs, nn, optim, pool, quantize,
                                     reduce, resize, rnn)

kernels: dict = {}
for _family in (conv, custom, elementwise, fused, indexing, layout, linalg, loss, movement,
                mxnet_outputs, nn, optim, pool, quantize, reduce, resize, rnn):
    _clash = kernels.keys() & _family.kernels.keys()
    if _clash:
        raise ValueError(f"kernels registered by two families: {sorted(_clash)}")
    kernels.update(_family.kernels)
