"""Changing the batch size of a graph exported with batch 1."""
import numpy as np

from portable.ir import GraphBuilder
from portable.passes.infer import infer_types
from portable.passes.set_batch import set_batch


def test_inputs_and_batch_baked_reshapes_follow_the_batch():
    b = GraphBuilder("g")
    x = b.input("x", (1, 2, 3, 3))
    flat = b.op("Reshape", b.op("Relu", x), b.const(np.array([1, 18], np.int64)))
    g = b.build([flat])
    g8 = set_batch(g, 8)
    info = infer_types(g8)
    assert g8.inputs[0][1].shape == (8, 2, 3, 3)
    assert info.types[g8.outputs[0]].shape == (8, 18)


def test_a_reshape_of_a_non_batch_tensor_is_left_alone():
    b = GraphBuilder("g")
    x = b.input("x", (1, 6))
    w = b.const(np.ones((2, 3), np.float32))
    y = b.op("Reshape", w, b.const(np.array([3, 2], np.int64)))
    g = b.build([b.op("Relu", x), y])
    assert infer_types(set_batch(g, 4)).types[g.outputs[1]].shape == (3, 2)
