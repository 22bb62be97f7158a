"""Import-time folding of constant nodes whose op portable does not implement.

Exporters often compute constants with ops outside portable's op set (PyTorch's attention
writes ``Mod`` of two Constants to check head sizes). When every input of such a node is known
while importing, onnx's reference evaluator computes its outputs once and they become constants:
the graph portable runs never contains the op. Nodes of random ops are never folded (a fold
would freeze one sample), nor nodes whose outputs would be large. Without the ``onnx`` package
(on a device) nothing folds, and such a node is reported as an op portable lacks.

Example:
    >>> values = fold_unimplemented(proto_node, [np.int64(16), np.int64(4)], opset=17)
    ... # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from portable.io.onnx.wire import Node

# Outputs of at most this many elements are folded.
FOLD_ELEMENTS = 1 << 20
_RANDOM_PREFIXES = ("Random", "Bernoulli", "Multinomial")


_SUBGRAPHS = (5, 10)  # AttributeProto.GRAPH, GRAPHS


def foldable(proto: Node, inputs: Sequence[np.ndarray | None]) -> bool:
    """Whether ``proto`` can be evaluated now: an ai.onnx op, not random, no subgraphs, and
    every present input known."""
    if proto.op_type.startswith(_RANDOM_PREFIXES):
        return False
    if any(a.type in _SUBGRAPHS for a in proto.attribute):
        return False
    return all(value is not None for name, value in zip(proto.input, inputs) if name)


def fold_unimplemented(proto: Node, inputs: Sequence[np.ndarray | None],
                       opset: int) -> list[np.ndarray] | None:
    """The node's outputs from onnx's reference evaluator, or None when it cannot compute
    them (or they are not plain numeric tensors of modest size, or onnx is absent)."""
    try:
        import onnx
        from onnx import helper, numpy_helper
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        return None

    names = [f"in{i}" if name else "" for i, name in enumerate(proto.input)]
    outputs = [f"out{i}" if name else "" for i, name in enumerate(proto.output)]
    node = helper.make_node(proto.op_type, names, outputs, domain=proto.domain)
    node.attribute.extend(onnx.NodeProto.FromString(bytes(proto.span)).attribute)
    initializers = [numpy_helper.from_array(np.ascontiguousarray(value), name)
                    for name, value in zip(names, inputs) if name]
    graph = helper.make_graph([node], "fold", [], [helper.make_empty_tensor_value_info(o)
                                                   for o in outputs if o], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        results = ReferenceEvaluator(model).run(None, {})
    except Exception:  # the reference evaluator's failures have no common base class
        return None
    arrays = [np.asarray(r) for r in results]
    if any(a.dtype.kind not in "biuf" or a.size > FOLD_ELEMENTS for a in arrays):
        return None
    return arrays
