"""ONNX both ways: import models into portable's IR, export graphs and symbols to ONNX, and the
``onnx.backend`` implementation that the ONNX conformance cases drive.

Example:
    >>> from exporters.onnx import export_model, import_model
    >>> sym, arg_params, aux_params = import_model("model.onnx")          # doctest: +SKIP
    >>> export_model(sym, {**arg_params, **aux_params}, "copy.onnx",
    ...              input_shapes={"data": (1, 3, 32, 32)})               # doctest: +SKIP
"""
from exporters.onnx.exporter import default_opset, export_graph, export_model
from exporters.onnx.importer import import_graph, import_model

__all__ = ["default_opset", "export_graph", "export_model", "import_graph", "import_model"]
