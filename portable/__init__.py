"""portable: an ONNX-interoperable deep-learning engine after the MXNet design.

Declarative ``sym`` graphs and imperative ``nd`` arrays share one IR, one set of op declarations
and one set of kernels (NumPy on the CPU; CUDA and OpenCL backends load on first use).

Example:
    >>> import portable as pt
    >>> x = pt.sym.var("x")
    >>> exe = pt.sym.relu(x).bind(pt.cpu(), {"x": pt.nd.array([-1.0, 2.0])})
    >>> exe.forward()[0].asnumpy()
    array([0., 2.], dtype=float32)
"""
from __future__ import annotations

import importlib
from typing import Any

from portable import errors, random
from portable.device import Device, cpu, cuda, null, opencl

__version__ = "0.1.0"

# Submodules imported on first attribute access keep `import portable` light.
_LAZY = {
    "nd": "portable.ndarray",
    "ndarray": "portable.ndarray",
    "sym": "portable.symbol",
    "symbol": "portable.symbol",
    "init": "portable.initializer",
    "initializer": "portable.initializer",
    "ir": "portable.ir",
    "autograd": "portable.autograd",
    "ops": "portable.ops",
    "gluon": "portable.gluon",
    "kv": "portable.kvstore",
    "kvstore": "portable.kvstore",
    "optim": "portable.optim",
    "optimizer": "portable.optim",
    "metric": "portable.metric",
    # MXNet 1.x namespaces (``import portable as mx`` runs MXNet scripts)
    "io": "portable.io",
    "mod": "portable.module",
    "module": "portable.module",
    "model": "portable.model",
    "lr_scheduler": "portable.optim.lr_scheduler",
    "callback": "portable.callback",
    "viz": "portable.viz",
    "visualization": "portable.viz",
    "name": "portable.name",
    "context": "portable.context",
    "test_utils": "portable.test_utils",
    "profiler": "portable.profiler",
    "np": "portable.numpy",
    "npx": "portable.numpy_extension",
    "operator": "portable.operator",
}

# MXNet 1.x names at the top level, each taken from the module that defines it.
_LAZY_ATTRIBUTES = {
    "gpu": "portable.context",
    "Context": "portable.context",
    "current_context": "portable.context",
}

__all__ = ["Device", "cpu", "cuda", "errors", "null", "opencl", "random", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY_ATTRIBUTES:
        value = getattr(importlib.import_module(_LAZY_ATTRIBUTES[name]), name)
        globals()[name] = value
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'portable' has no attribute {name!r}")
    value = importlib.import_module(module)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_ATTRIBUTES))
