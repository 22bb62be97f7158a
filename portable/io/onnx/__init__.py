"""Reading ONNX models into portable's IR, with no ``onnx`` package needed (on a phone, say).

``wire.py`` decodes the protobuf wire format (the file memory-mapped, raw tensors viewed, not
copied); ``schemas.py`` holds the ai.onnx operator schemas as data; ``reading.py`` turns wire
messages into values and types; ``versions.py`` and ``steps.py`` translate older opsets to the
canonical form (and back, for the exporter); ``importer.py`` runs the whole import and
``symbolic.py`` wraps an imported graph as a Symbol. Writing ONNX needs the ``onnx`` package
and lives in the ``exporters.onnx`` edge, which registers itself with
``portable.io.exporters``.

Example:
    >>> from portable.io.onnx.importer import import_graph, import_model
    >>> graph, params = import_graph("model.onnx")                   # doctest: +SKIP
    >>> sym, arg_params, aux_params = import_model("model.onnx")     # doctest: +SKIP
"""
