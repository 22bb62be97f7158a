"""Op declarations, one module per family; importing this package fills ``ops``."""
from __future__ import annotations

from portable.ops import conv, elementwise, linalg, loss, movement, nn, reduce, rnn  # noqa: F401
# (these build on the families above)
from portable.ops import (bitwise, indexing, layout, optim, quantize, resize,  # noqa: F401
                          unary_math)
from portable.ops import signal  # noqa: F401
from portable.ops import fused  # noqa: F401  (after the families whose ops it combines)
from portable.ops import custom  # noqa: F401  (Python ops: mx.operator.CustomOp)
from portable.ops import mxnet_outputs  # noqa: F401
from portable.ops import ml, random  # noqa: F401  (ai.onnx.ml; random ops)
from portable.ops import ml_linear, ml_models  # noqa: F401  (more of ai.onnx.ml)
from portable.ops import image_decoder  # noqa: F401
from portable.ops import sampling  # noqa: F401
from portable.ops import sequence_mixing  # noqa: F401
from portable.ops import attention  # noqa: F401
from portable.ops import crop, normalization_extra, pooling_extra  # noqa: F401
from portable.ops import integer_linear, strings  # noqa: F401
from portable.ops import control_flow  # noqa: F401  (If, Loop, Scan: subgraphs)
from portable.ops import flex_attention  # noqa: F401  (ai.onnx.preview; runs subgraphs)
from portable.ops import sequence  # noqa: F401  (sequences and optionals)
from portable.ops import data_dependent  # noqa: F401  (NonZero, Unique, Compress, NMS)
from portable.ops.registry import Attr, InferContext, OpDef, declare, get, ops

__all__ = ["Attr", "InferContext", "OpDef", "declare", "get", "ops"]
