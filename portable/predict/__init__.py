"""On-device inference: ``Predictor`` runs an ONNX or deployment file with NumPy alone (or
pyopencl for a GPU), in a memory plan made once and checked against a budget.

``import portable.predict`` imports NumPy and portable's core only: neither ``onnx`` nor
``safetensors`` (the deployment format is read with NumPy, ONNX with a wire-format reader).

Example:
    >>> from portable.predict import Predictor
    >>> p = Predictor("runs/lenet.onnx", memory_budget="64MB")   # doctest: +SKIP
    >>> scores, = p.predict(image)                               # doctest: +SKIP
"""
from portable.predict.formats import load_graph
from portable.predict.predictor import Predictor
from portable.predict.resident import machine_bytes, peak_resident_bytes, reset_peak_resident
from portable.sizes import format_bytes, parse_size

__all__ = ["Predictor", "format_bytes", "load_graph", "machine_bytes", "parse_size",
           "peak_resident_bytes", "reset_peak_resident"]
