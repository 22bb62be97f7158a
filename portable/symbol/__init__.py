"""The declarative front end (``portable.sym``): variables, one function per op, MXNet layers."""
from portable.symbol.layers import (Activation, BatchNorm, Convolution, Dropout, Flatten,
                                    FullyConnected, Pooling, SoftmaxCrossEntropy)
from portable.symbol.ops import apply_op, constant, generated_functions
from portable.symbol.symbol import Group, Symbol, Variable, fromjson, load, var

# The generated op functions come first so the helpers below keep their names (the op
# Constant would otherwise shadow the ``constant`` helper).
globals().update(generated_functions())
from portable.symbol.ops import apply_op, constant  # noqa: E402,F811

__all__ = ["Activation", "BatchNorm", "Convolution", "Dropout", "Flatten", "FullyConnected",
           "Group", "Pooling", "SoftmaxCrossEntropy", "Symbol", "Variable", "apply_op",
           "constant", "fromjson", "load", "var"] + sorted(generated_functions())
