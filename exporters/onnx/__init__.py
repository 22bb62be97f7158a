"""ONNX both ways: import models into portable's IR, export graphs and symbols to ONNX, and the
``onnx.backend`` implementation that the ONNX conformance cases drive.

Importing needs no ``onnx`` package (``wire.py`` reads the protobuf format itself); exporting
does. Names are resolved on first use, so ``import portable.io.onnx.importer`` on a device never
imports the exporter or ``onnx``.

Example:
    >>> from exporters.onnx import export_model, import_model
    >>> sym, arg_params, aux_params = import_model("model.onnx")          # doctest: +SKIP
    >>> export_model(sym, {**arg_params, **aux_params}, "copy.onnx",
    ...              input_shapes={"data": (1, 3, 32, 32)})               # doctest: +SKIP
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"default_opset": "exporters.onnx.exporter", "export_graph": "exporters.onnx.exporter",
         "export_model": "exporters.onnx.exporter", "import_graph": "portable.io.onnx.importer",
         "import_model": "portable.io.onnx.importer"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'exporters.onnx' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
