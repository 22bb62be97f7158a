"""The OpenCL kernel table, gathered from one module per op family."""
from __future__ import annotations

from backends.opencl.kernels import (conv, custom, elementwise, fused, indexing, layout, linalg,
                                     loss, movement, mxnet_outputs, nn, optim, pool, quantize,
                                     reduce, resize, rnn)
from backends.opencl.kernels import sampling
from backends.opencl.kernels import sequence_mixing
from backends.opencl.kernels import signal
from backends.opencl.kernels import ml, random  # (ai.onnx.ml; random ops)
from backends.opencl.kernels import ml_linear  # (more of ai.onnx.ml)
from backends.opencl.kernels import image_decoder
from backends.opencl.kernels import attention, flex_attention
from backends.opencl.kernels import crop, normalization_extra, pooling_extra
from backends.opencl.kernels import integer_linear, strings
from backends.opencl.kernels import sequence
from backends.opencl.kernels import control_flow
from backends.opencl.kernels import data_dependent

kernels: dict = {}
for _family in (conv, custom, elementwise, fused, indexing, layout, linalg, loss, movement,
                attention, flex_attention,
                mxnet_outputs, nn, optim, pool, quantize, reduce, resize, rnn,
                sampling, sequence_mixing, signal, ml, random, crop, normalization_extra,
                pooling_extra, integer_linear, strings, sequence, control_flow, data_dependent,
                ml_linear, image_decoder):
    _clash = kernels.keys() & _family.kernels.keys()
    if _clash:
        raise ValueError(f"kernels registered by two families: {sorted(_clash)}")
    kernels.update(_family.kernels)
