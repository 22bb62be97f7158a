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
