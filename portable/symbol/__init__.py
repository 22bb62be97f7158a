"""The declarative front end (``portable.sym``): variables, one function per op, MXNet layers,
and MXNet 1.x's symbol functions (``Concat``, ``dot``, ``sum(x, axis=1)`` ...)."""
from portable.symbol.layers import (Activation, BatchNorm, Convolution, Dropout, Flatten,
                                    FullyConnected, Pooling, SoftmaxCrossEntropy)
from portable.symbol.ops import apply_op, constant, generated_functions, mxnet_overrides
from portable.symbol.symbol import (Group, Symbol, Variable, compose, fromjson, load, load_json,
                                    var)

# The generated op functions come first so the helpers below keep their names (the op
# Constant would otherwise shadow the ``constant`` helper).
globals().update(generated_functions())
from portable.symbol.ops import apply_op, constant  # noqa: E402,F811
from portable.symbol.mxnet_outputs import FUNCTIONS as _OUTPUTS  # noqa: E402
from portable.symbol.mxnet_api import mxnet_functions as _mxnet_functions  # noqa: E402

globals().update(_OUTPUTS)  # SoftmaxOutput and the regression outputs (MXNet names)
# MXNet 1.x's names that portable lacks; the layer functions above keep theirs.
globals().update({k: v for k, v in _mxnet_functions().items() if k not in globals()})
# Names whose ONNX meaning differs from MXNet's (sum/mean/max/min reduce; reshape with
# shape codes ...): MXNet's, still answering the ONNX-style calls portable makes.
globals().update(mxnet_overrides(globals()))

__all__ = ["Activation", "BatchNorm", "Convolution", "Dropout", "Flatten", "FullyConnected",
           "Group", "Pooling", "SoftmaxCrossEntropy", "Symbol", "Variable", "apply_op",
           "compose", "constant", "fromjson", "load", "load_json", "var"] + sorted(
    generated_functions())


def __getattr__(name: str):
    if name == "Custom":  # MXNet's sym.Custom lives with mx.operator, imported on first use
        from portable.operator import custom_symbol

        return custom_symbol
    if name == "contrib":  # sym.contrib: symbolic control flow (Scan, Loop, If nodes)
        import importlib

        return importlib.import_module("portable.symbol.contrib")
    raise AttributeError(f"module 'portable.symbol' has no attribute {name!r}")
