"""Format edges of portable: ``exporters.onnx`` reads and writes ONNX models.

This is the only package that imports ``onnx`` (DESIGN.md section 2); the core never does.
"""
