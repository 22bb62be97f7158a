"""onnxruntime as the reference of ai.onnx.ml op-table cases whose answers onnxruntime defines
and onnx.reference does not give the same way (classifier labels and score columns, binary
problems, Normalizer's MAX). Models exported from scikit-learn are run with onnxruntime, so its
answers are the ones portable must give. Without onnxruntime such a case is skipped."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest


def onnxruntime_reference(op: str, outputs: int = 1) -> Callable:
    """A Case ``reference`` that runs the one-node model of ``op`` (``ai.onnx.ml.<Op>``) on
    onnxruntime's CPU provider."""
    def run(inputs, attrs):
        ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference here")
        import onnx
        from onnx import helper, numpy_helper

        domain, _, op_type = op.rpartition(".")
        names = [f"in{i}" for i in range(len(inputs))]
        outs = [f"out{j}" for j in range(outputs)]
        values = {k: numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v
                  for k, v in attrs.items()}
        node = helper.make_node(op_type, names, outs, domain=domain, **values)
        typed = [helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.asarray(v).shape)
            for n, v in zip(names, inputs)]
        graph = helper.make_graph([node], "case", typed,
                                  [onnx.ValueInfoProto(name=o) for o in outs])
        model = helper.make_model(graph, ir_version=10, opset_imports=[
            helper.make_opsetid("", 21), helper.make_opsetid(domain, 3)])
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        return session.run(None, dict(zip(names, inputs)))
    return run
