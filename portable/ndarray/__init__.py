"""Imperative tensors (MXNet's ``nd`` namespace): arrays, one function per op, random."""
from portable.ndarray import random
from portable.ndarray import mxnet_functions
from portable.ndarray.functions import generated_functions, install_operators, mxnet_aliases
from portable.ndarray.ndarray import (NDArray, arange, array, contiguous_zeros, empty,
                                      from_dlpack, full, ones, ones_like, waitall, zeros,
                                      zeros_like)

install_operators()
globals().update(generated_functions())
globals().update(mxnet_aliases())
globals().update(mxnet_functions.FUNCTIONS)
for _name in mxnet_functions.METHODS:  # (x.take(i), x.expand_dims(axis) ...)
    setattr(NDArray, _name, mxnet_functions.FUNCTIONS[_name])

__all__ = ["NDArray", "arange", "array", "contiguous_zeros", "empty", "from_dlpack", "full",
           "ones", "ones_like", "random", "waitall", "zeros", "zeros_like"]

# MXNet 1.x names that live in modules of their own, imported on first use.
_LAZY_ATTRIBUTES = {
    "save": "portable.ndarray.mxnet_files",   # MXNet's binary NDArray file format
    "load": "portable.ndarray.mxnet_files",
    "load_frombuffer": "portable.ndarray.mxnet_files",
    "Custom": "portable.operator",            # mx.operator.CustomOp run imperatively
}
_LAZY_ATTRIBUTES.update(dict.fromkeys(  # MXNet's loss-output ops run imperatively
    ("SoftmaxOutput", "LinearRegressionOutput", "LogisticRegressionOutput",
     "MAERegressionOutput"), "portable.ndarray.mxnet_outputs"))
_LAZY_MODULES = {"linalg": "portable.ndarray.linalg", "contrib": "portable.ndarray.contrib"}


def __getattr__(name: str):
    import importlib

    if name in _LAZY_ATTRIBUTES:
        value = getattr(importlib.import_module(_LAZY_ATTRIBUTES[name]), name)
    elif name in _LAZY_MODULES:
        value = importlib.import_module(_LAZY_MODULES[name])
    else:
        raise AttributeError(f"module 'portable.ndarray' has no attribute {name!r}")
    globals()[name] = value
    return value
