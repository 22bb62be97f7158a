"""The NumPy kernel table, gathered from one module per op family."""
from __future__ import annotations

from backends.xp.kernels import (conv, custom, elementwise, fused, indexing, layout, linalg,
                                    loss, movement, nn, optim, quantize, reduce, resize, rnn)
from backends.xp.kernels import mxnet_outputs
from backends.xp.kernels import ml, random  # (ai.onnx.ml; random ops)
from backends.xp.kernels import ml_linear, ml_models
from backends.xp.kernels import image_decoder
from backends.xp.kernels import signal
from backends.xp.kernels import sampling
from backends.xp.kernels import sequence_mixing
from backends.xp.kernels import attention, flex_attention
from backends.xp.kernels import crop, normalization_extra, pooling_extra
from backends.xp.kernels import integer_linear, strings
from backends.xp.kernels import sequence
from backends.xp.kernels import control_flow
from backends.xp.kernels import data_dependent

kernels: dict = {}
for _family in (conv, custom, elementwise, fused, indexing, layout, linalg, loss, movement, nn,
                attention, flex_attention,
                optim, quantize, reduce, resize, rnn, mxnet_outputs, ml, random, sampling,
                sequence_mixing, signal, crop, normalization_extra, pooling_extra,
                integer_linear, strings, sequence, control_flow, ml_linear, ml_models,
                data_dependent, image_decoder):
    _clash = kernels.keys() & _family.kernels.keys()
    if _clash:
        raise ValueError(f"kernels registered by two families: {sorted(_clash)}")
    kernels.update(_family.kernels)
