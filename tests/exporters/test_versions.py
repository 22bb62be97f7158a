"""Older op versions import into the canonical form and compute what onnxruntime computes;
canonical graphs export at every opset from 9 to the newest (checker-valid, strict shape
inference clean, onnxruntime agrees), or refuse naming the op and opset."""
import numpy as np
import pytest

from tests.exporters.helpers import make_model, onnx, ort_run, tensor

from portable.device import cpu
from portable.errors import OpError, PortableError, UnknownOpError
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder

from exporters.onnx import backend, default_opset, export_graph, import_graph
from portable.io.onnx.versions import newest_opset

helper = onnx.helper
RNG = np.random.default_rng(0)
X3 = RNG.normal(size=(2, 3, 4)).astype(np.float32)
X4 = RNG.normal(size=(2, 3, 5, 5)).astype(np.float32)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


BN_PARAMS = [tensor("s", [1, 2, 3]), tensor("b", [0.1, 0.2, 0.3]), tensor("m", [0, 1, 2]),
             tensor("v", [1, 2, 0.5])]
# name -> (opset, nodes, inputs, outputs, initializers): older forms of canonical ops
OLD_FORMS = {
    "reduce_sum_axes_attribute": (11, [node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0)],
                                  [("x", X3)], ["y"], []),
    "reduce_mean_all_axes": (9, [node("ReduceMean", ["x"], ["y"])], [("x", X3)], ["y"], []),
    "reduce_max_axes_attribute": (13, [node("ReduceMax", ["x"], ["y"], axes=[-1])],
                                  [("x", X3)], ["y"], []),
    "softmax_coerced_rows": (11, [node("Softmax", ["x"], ["y"], axis=1)], [("x", X3)], ["y"],
                             []),
    "softmax_default_axis": (9, [node("Softmax", ["x"], ["y"])], [("x", X3)], ["y"], []),
    "log_softmax_negative": (12, [node("LogSoftmax", ["x"], ["y"], axis=-2)], [("x", X3)],
                             ["y"], []),
    "pad_attributes": (9, [node("Pad", ["x"], ["y"], pads=[0, 1, 0, 0, 1, 2], value=1.5)],
                       [("x", X3)], ["y"], []),
    "pad_reflect": (9, [node("Pad", ["x"], ["y"], pads=[0, 1, 1, 0, 1, 2], mode="reflect")],
                    [("x", X3)], ["y"], []),
    "slice_attributes": (9, [node("Slice", ["x"], ["y"], starts=[0, 1], ends=[10, -1],
                                  axes=[1, 2])], [("x", X3)], ["y"], []),
    "split_attribute": (9, [node("Split", ["x"], ["a", "b"], axis=2, split=[1, 3])],
                        [("x", X3)], ["a", "b"], []),
    "split_equal": (11, [node("Split", ["x"], ["a", "b"], axis=2)], [("x", X3)], ["a", "b"],
                    []),
    "squeeze_axes_attributes": (11, [node("Unsqueeze", ["x"], ["u"], axes=[0, 4]),
                                     node("Squeeze", ["u"], ["y"], axes=[0])], [("x", X3)],
                                ["y"], []),
    "clip_attributes": (9, [node("Clip", ["x"], ["y"], min=-0.5, max=0.5)], [("x", X3)], ["y"],
                        []),
    "clip_min_only": (7, [node("Clip", ["x"], ["y"], min=-0.5)], [("x", X3)], ["y"], []),
    "reshape_opset7": (7, [node("Reshape", ["x", "s"], ["y"])], [("x", X3)], ["y"],
                       [tensor("s", [3, -1], np.int64)]),
    "batch_norm_spatial": (7, [node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                                    epsilon=1e-3, spatial=1)], [("x", X4)], ["y"], BN_PARAMS),
    "batch_norm_9": (9, [node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
                     [("x", X4)], ["y"], BN_PARAMS),
    "dropout_float_mask_unused": (7, [node("Dropout", ["x"], ["y", "mask"], ratio=0.3)],
                                  [("x", X3)], ["y"], []),
    "gemm_opset7": (7, [node("Gemm", ["a", "w", "c"], ["y"], transB=1)],
                    [("a", RNG.normal(size=(2, 4)).astype(np.float32))], ["y"],
                    [tensor("w", RNG.normal(size=(3, 4))), tensor("c", [1, 2, 3])]),
    "max_pool_8": (8, [node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                   [("x", X4)], ["y"], []),
    "average_pool_count_pad": (7, [node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3],
                                        pads=[1, 1, 1, 1], count_include_pad=1)],
                               [("x", X4)], ["y"], []),
    "lstm_7": (7, [node("LSTM", ["x", "W", "R"], ["y", "h"], hidden_size=2)], [("x", X3)],
               ["y", "h"], [tensor("W", RNG.normal(size=(1, 8, 4))),
                            tensor("R", RNG.normal(size=(1, 8, 2)))]),
    "constant_value_floats": (12, [node("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0, 4.0]),
                                   node("Add", ["x", "c"], ["y"])], [("x", X3)], ["y"], []),
    "not_opset_1": (1, [node("Not", ["x"], ["y"])], [("x", X3 > 0)], ["y"], []),
    "reduce_norms_axes_attribute": (13, [node("ReduceL2", ["x"], ["a"], axes=[1]),
                                         node("ReduceL1", ["x"], ["b"], axes=[-1], keepdims=0),
                                         node("ReduceLogSumExp", ["x"], ["c"], axes=[0, 2]),
                                         node("ReduceSumSquare", ["x"], ["d"]),
                                         node("ReduceProd", ["x"], ["e"], axes=[2])],
                                    [("x", X3)], ["a", "b", "c", "d", "e"], []),
    "top_k_attribute": (9, [node("TopK", ["x"], ["v", "i"], k=2, axis=1)], [("x", X3)],
                        ["v", "i"], []),
}


@pytest.mark.parametrize("name", sorted(OLD_FORMS))
def test_older_versions_match_onnxruntime(name):
    opset, nodes, inputs, outputs, inits = OLD_FORMS[name]
    model = make_model(nodes, inputs, outputs, opset, inits,
                       ir_version=3 if opset < 7 else None)
    feeds = dict(inputs)
    expected = ort_run(model, feeds)
    got = backend.prepare(model).run(feeds)
    for e, g in zip(expected, got):
        assert e.shape == g.shape and e.dtype == g.dtype
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_legacy_broadcasting_of_opset_6():
    """onnxruntime no longer runs Add-6; its meaning: B aligned with A's axes from ``axis``."""
    b = np.array([1.0, 2.0, 3.0], np.float32)
    model = make_model([node("Add", ["x", "b"], ["y"], broadcast=1, axis=1)], [("x", X3)],
                       ["y"], 6, [tensor("b", b)], ir_version=3)
    (y,) = backend.prepare(model).run([X3])
    np.testing.assert_allclose(y, X3 + b[:, None], rtol=1e-6)


def test_legacy_forms_are_refused_naming_op_and_opset():
    model = make_model([node("Relu", ["x"], ["y"])], [("x", X3)], ["y"], 5, ir_version=3)
    with pytest.raises(UnknownOpError, match=r"'Relu' version 1 \(ai.onnx opset 5\)"):
        import_graph(model)
    spatial = make_model([node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                               spatial=0)], [("x", X4)], ["y"], 7, BN_PARAMS)
    with pytest.raises(PortableError, match="spatial=0"):
        import_graph(spatial)


def _canonical_graph():
    b = GraphBuilder("canonical")
    x, w = b.input("x", (2, 3, 4)), b.input("w", (4,))

    def ints(values):
        return b.const(np.asarray(values, np.int64))

    centred = b.op("Sub", x, b.op("ReduceMean", x, ints([1]), keepdims=1))
    soft = b.op("Softmax", centred, axis=-1)
    log_soft = b.op("LogSoftmax", x, axis=1)
    padded = b.op("Pad", soft, ints([1, 1]), b.const(np.float32(0.5)), ints([2]))
    left, right = b.op("Split", padded, axis=2, num_outputs=2, outputs=2)
    gelu = b.op("Gelu", left)
    norm = b.op("LayerNormalization", x, w, w, axis=-1, epsilon=1e-5)
    reduced = b.op("ReduceMax", b.op("HardSwish", norm), ints([0, 2]), keepdims=0)
    expanded = b.op("Unsqueeze", reduced, ints([0]))
    sliced = b.op("Slice", x, ints([0, 1]), ints([2, 4]), ints([1, 2]))
    clipped = b.op("Clip", sliced, b.const(np.float32(-0.2)), b.const(np.float32(0.3)))
    shape = b.op("Shape", x, start=1)
    flat = b.op("Dropout", b.op("Reshape", clipped, ints([2, -1])), b.const(np.float32(0.2)))
    dense = b.op("Gemm", flat, b.const(RNG.normal(size=(6, 3)).astype(np.float32)))
    norm2 = b.op("ReduceL2", x, ints([1]), keepdims=0)
    top, _ = b.op("TopK", x, ints([2]), axis=-1, outputs=2)
    return b.build([gelu, right, expanded, log_soft, shape, dense, norm2, top])


GRAPH = _canonical_graph()
W = RNG.normal(size=4).astype(np.float32)
OURS = [np.asarray(o).copy() for o in CompiledGraph(GRAPH, cpu()).run({"x": X3, "w": W})]


@pytest.mark.parametrize("opset", sorted({9, 11, 13, 14, 16, 17, 18, 19, 20, 21, 22,
                                          newest_opset(), default_opset()}))
def test_export_at_older_opsets(opset):
    model = export_graph(GRAPH, {"w": W}, opset=opset, dynamic_batch=True)
    assert model.opset_import[0].version == opset
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, strict_mode=True)
    for ours, theirs in zip(OURS, ort_run(model, {"x": X3})):
        np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-5)
    kinds = {n.op_type for n in model.graph.node}
    assert ("Gelu" in kinds) == (opset >= 20) and ("HardSwish" in kinds) == (opset >= 14)
    assert ("LayerNormalization" in kinds) == (opset >= 17)


def test_export_refuses_what_an_old_opset_cannot_say():
    with pytest.raises(UnknownOpError, match=r"op Erf\) has no ONNX form at opset 7.*>= 9"):
        export_graph(GRAPH, {"w": W}, opset=7)
    b = GraphBuilder("wrap")
    x = b.input("x", (3, 4))
    y = b.op("Pad", x, b.const(np.asarray([1, 1, 1, 1], np.int64)), mode="wrap")
    with pytest.raises(OpError, match="'wrap'.*opset >= 19"):
        export_graph(b.build([y]), opset=18)
    with pytest.raises(OpError, match="opset 99"):
        export_graph(b.build([y]), opset=99)


def test_bit_shift_of_signed_values_needs_opset_28():
    """Unsigned shifts export to older opsets, signed ones at 28 (both match onnxruntime);
    below 28 a signed shift is refused naming the node, op and opset."""
    for dtype, opsets in ((np.uint8, (18, default_opset())), (np.int32, (default_opset(),))):
        b = GraphBuilder("shift")
        x = b.input("x", (4,), dtype)
        y = b.op("BitShift", x, b.const(np.array([1, 2, 3, 0], dtype)), direction="LEFT")
        graph = b.build([y])
        feed = np.array([1, 3, 100, -1 if dtype == np.int32 else 255], dtype)
        ours = CompiledGraph(graph, cpu()).run({"x": feed})[0]
        for opset in opsets:
            model = export_graph(graph, opset=opset)
            np.testing.assert_array_equal(ort_run(model, {"x": feed})[0], ours)
    with pytest.raises(OpError, match=r"BitShift.*opset 23\).*opset >= 28"):
        export_graph(graph, opset=23)


def test_default_opset_is_one_onnxruntime_runs():
    ort = pytest.importorskip("onnxruntime")
    opset = default_opset()
    assert 13 <= opset <= newest_opset()
    model = export_graph(GRAPH, {"w": W})
    assert model.opset_import[0].version == opset
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_resize_exports_from_opset_11_and_refuses_version_10():
    """Resize in its opset-19 form writes opset 11 to newest (onnxruntime agrees); version 10,
    whose scales were input 1, is refused both ways naming the node, op and opset."""
    x = RNG.normal(size=(1, 2, 4, 5)).astype(np.float32)
    b = GraphBuilder("resize")
    data = b.input("x", x.shape)
    y = b.op("Resize", data, None, b.const(np.array([1, 1, 2, 1.5], np.float32)), mode="linear")
    graph = b.build([y])
    ours = CompiledGraph(graph, cpu()).run({"x": x})[0]
    for opset in (11, 13, 18, default_opset()):
        np.testing.assert_allclose(ort_run(export_graph(graph, opset=opset), {"x": x})[0], ours,
                                   rtol=1e-5, atol=1e-5)
    with pytest.raises(OpError, match=r"Resize.*opset 10\).*before version 11"):
        export_graph(graph, opset=10)
    old = make_model([node("Resize", ["x", "s"], ["y"], mode="nearest")], [("x", x)], ["y"], 10,
                     [tensor("s", [1, 1, 2, 2])])
    with pytest.raises(OpError, match=r"Resize.*before version 11"):
        import_graph(old)


def test_group_normalization_before_21_is_refused_naming_the_version():
    """Version 18 scaled each group, 21 each channel: an opset-18 model is refused, not
    silently misread."""
    x = RNG.normal(size=(1, 4, 3)).astype(np.float32)
    old = make_model([node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)],
                     [("x", x)], ["y"], 18, [tensor("s", [1, 2]), tensor("b", [0, 1])])
    with pytest.raises(OpError, match=r"GroupNormalization.*before version 21"):
        import_graph(old)
