"""Op-table cases: the sequence and optional ops (portable/ops/sequence.py).

A list among a case's inputs is a sequence (fed as a Python list of arrays, declared as a
SequenceType whose dims are None where the elements differ); an output sequence comes back
as a list. Expected values come from onnx.reference, except for SequenceMap and Optional
without an input (a graph or a type as an attribute), whose NumPy references are written
here. None of these ops is differentiable.
"""
import numpy as np

from portable.ir import GraphBuilder, TensorType
from tests.ops.harness import Case, rand

I64 = np.int64
# Elements of different shapes: sequence positions pick them, ConcatFromSequence joins them.
RAGGED = [rand(2, 3, seed=1), rand(1, 3, seed=2), rand(4, 3, seed=3)]
SAME = [rand(2, 3, seed=4), rand(2, 3, seed=5)]


def _add_body():
    """SequenceMap's body: y = x + 1 and the shape of x, per element."""
    b = GraphBuilder("add_one")
    x = b.input("x", (None, 3), "float32")
    b.op("Add", x, b.const(np.ones((), np.float32)), outputs=["y"])
    b.op("Shape", x, outputs=["s"])
    return b.build(["y", "s"])


def _map_reference(inputs, attrs):
    return [[x + np.float32(1) for x in inputs[0]],
            [np.array(x.shape, I64) for x in inputs[0]]]


CASES = [
    Case("SequenceEmpty", [], attrs={"dtype": 7}, grad=False, name="int64",
         reference=lambda inputs, attrs: [[]]),
    Case("SequenceConstruct", RAGGED, grad=False, name="ragged"),
    Case("SequenceConstruct", [SAME[0]], grad=False, name="one"),
    Case("SequenceAt", [RAGGED, np.array(1, I64)], grad=False, name="ragged"),
    Case("SequenceAt", [SAME, np.array(-1, np.int32)], grad=False, name="negative_static"),
    Case("SequenceAt", [RAGGED, np.array(0, I64)], const=(1,), grad=False, name="const"),
    Case("SequenceInsert", [RAGGED, rand(3, 3, seed=6)], grad=False, name="at_back"),
    Case("SequenceInsert", [RAGGED, rand(3, 3, seed=6), np.array(-3, I64)], grad=False,
         name="at_front_negative"),
    # position == length appends (the ONNX spec's range is [-n, n]); onnx.reference 1.23
    # computes (n + n) % n = 0 and inserts at the front, so the reference is written here
    Case("SequenceInsert", [RAGGED, rand(3, 3, seed=6), np.array(3, I64)], grad=False,
         name="at_length", reference=lambda inputs, attrs: [inputs[0] + [inputs[1]]]),
    Case("SequenceErase", [RAGGED], grad=False, name="last"),
    Case("SequenceErase", [RAGGED, np.array(-3, I64)], grad=False, name="first_negative"),
    Case("SequenceLength", [RAGGED], grad=False),
    Case("SplitToSequence", [rand(3, 4, seed=7)], grad=False, name="default"),
    Case("SplitToSequence", [rand(3, 4, seed=7)], attrs={"axis": 1, "keepdims": 0},
         grad=False, name="nokeepdims"),
    Case("SplitToSequence", [rand(5, 2, seed=8), np.array(2, I64)], grad=False,
         name="scalar_uneven"),
    Case("SplitToSequence", [rand(2, 6, seed=9), np.array([1, 3, 2], I64)],
         attrs={"axis": -1}, grad=False, name="sizes"),
    Case("SplitToSequence", [rand(2, 6, seed=9), np.array([4, 2], I64)], const=(1,),
         attrs={"axis": 1}, grad=False, name="const_sizes"),
    Case("ConcatFromSequence", [RAGGED], attrs={"axis": 0}, grad=False, name="ragged"),
    Case("ConcatFromSequence", [SAME], attrs={"axis": -1}, grad=False, name="last_axis"),
    Case("ConcatFromSequence", [SAME], attrs={"axis": 2, "new_axis": 1}, grad=False,
         name="new_last_axis"),
    Case("ConcatFromSequence", [SAME], attrs={"axis": 0, "new_axis": 1}, grad=False,
         name="stack"),
    # (onnx.reference 1.23 returns an optional as a one-element list: the closed form here)
    Case("Optional", [rand(2, 2, seed=10)], grad=False, name="tensor",
         reference=lambda inputs, attrs: [inputs[0]]),
    Case("Optional", [RAGGED], grad=False, name="sequence",
         reference=lambda inputs, attrs: [inputs[0]]),
    Case("Optional", [], attrs={"type": TensorType((2,), "float32")}, grad=False,
         name="empty", reference=lambda inputs, attrs: [None]),
    Case("OptionalHasElement", [rand(3, seed=11)], grad=False, name="tensor"),
    Case("OptionalHasElement", [None], grad=False, name="absent"),
    Case("OptionalGetElement", [rand(3, seed=11)], grad=False, name="tensor"),
    Case("OptionalGetElement", [RAGGED], grad=False, name="sequence"),
    # Identity passes a sequence on (its tensor cases are in cases_elementwise.py)
    Case("Identity", [RAGGED], grad=False, name="sequence"),
    Case("SequenceMap", [RAGGED], attrs={"body": _add_body()}, outputs=2, grad=False,
         reference=_map_reference, name="add_and_shape"),
]
