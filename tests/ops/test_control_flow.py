"""If, Loop and Scan imported from ONNX with outer-scope references, run through the onnx
backend against onnxruntime (onnx's reference evaluator cannot join the scan outputs of a
Loop without a condition input, nor an empty one); bad bodies fail naming the node."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from exporters.onnx import backend
from portable.errors import GraphError, SerializationError, ShapeError
from portable.io.onnx.importer import import_graph

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, opset=21):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(model, feeds, atol=1e-6):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    got = backend.prepare(model).run([feeds[i.name] for i in model.graph.input])
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-6, atol=atol)


def _loop_model(body_add_dtype=F):
    """y = x; for i < M: y = y * w + i (w read from the outer scope); scan output y."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["y_in", "w"], ["yw"]),
         helper.make_node("Cast", ["i"], ["i_f"], to=body_add_dtype),
         helper.make_node("Add", ["yw", "i_f"], ["y_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("Identity", ["y_out"], ["scan"])],
        "body", [_vi("i", I64, []), _vi("c_in", B, []), _vi("y_in", F, [3])],
        [_vi("c_out", B, []), _vi("y_out", F, [3]), _vi("scan", F, [3])])
    nodes = [helper.make_node("Neg", ["v"], ["w"]),  # the value the body captures
             helper.make_node("Loop", ["M", "", "x"], ["y", "ys"], body=body, name="my_loop")]
    return _model(nodes, [_vi("M", I64, []), _vi("x", F, [3]), _vi("v", F, [3])],
                  [_vi("y", F, [3]), _vi("ys", F, [None, 3])])


def test_loop_with_outer_scope_reference_matches_reference():
    feeds = {"M": np.array(4, np.int64), "x": np.array([1.0, 2.0, -1.0], np.float32),
             "v": np.array([0.5, -1.0, 2.0], np.float32)}
    _check(_loop_model(), feeds)


def test_loop_zero_trips_gives_initial_values_and_empty_scan():
    feeds = {"M": np.array(0, np.int64), "x": np.array([1.0, 2.0, 3.0], np.float32),
             "v": np.ones(3, np.float32)}
    _check(_loop_model(), feeds)


def test_captures_are_explicit_inputs_of_node_and_body():
    graph, _ = import_graph(_loop_model().SerializeToString())
    loop = next(n for n in graph.nodes if n.op == "Loop")
    body = loop.attrs["body"]
    assert body.captures == ("w",)
    assert loop.inputs[-1] == "w" and body.input_names[-1] == "w"
    # the producer of the captured value comes first
    assert [n.op for n in graph.nodes].index("Neg") < [n.op for n in graph.nodes].index("Loop")


def test_if_nested_in_loop_captures_through_both_levels():
    then = helper.make_graph([helper.make_node("Add", ["acc", "k"], ["r"])], "then", [],
                             [_vi("r", F, [2])])
    other = helper.make_graph([helper.make_node("Sub", ["acc", "k"], ["r2"])], "else", [],
                              [_vi("r2", F, [2])])
    body = helper.make_graph(
        [helper.make_node("Less", ["i", "half"], ["small"]),
         helper.make_node("If", ["small"], ["acc_out"], then_branch=then, else_branch=other),
         helper.make_node("Identity", ["c"], ["c_out"])],
        "body", [_vi("i", I64, []), _vi("c", B, []), _vi("acc", F, [2])],
        [_vi("c_out", B, []), _vi("acc_out", F, [2])])
    model = _model([helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)],
                   [_vi("M", I64, []), _vi("x", F, [2]), _vi("k", F, [2]),
                    _vi("half", I64, [])], [_vi("y", F, [2])])
    feeds = {"M": np.array(5, np.int64), "x": np.array([1.0, -2.0], np.float32),
             "k": np.array([0.25, 3.0], np.float32), "half": np.array(2, np.int64)}
    _check(model, feeds)
    _roundtrip_matches(model, feeds)
    graph, _ = import_graph(model.SerializeToString())
    loop = graph.nodes[0]
    assert set(loop.attrs["body"].captures) == {"k", "half"}
    inner = next(n for n in loop.attrs["body"].nodes if n.op == "If")
    assert inner.attrs["then_branch"].captures == ("acc", "k")


def test_scan_with_reverse_direction_and_capture():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x_t"], ["s2"]),
         helper.make_node("Mul", ["s2", "scale"], ["out_t"])],
        "body", [_vi("s", F, [2]), _vi("x_t", F, [2])], [_vi("s2", F, [2]), _vi("out_t", F, [2])])
    model = _model([helper.make_node("Scan", ["s0", "xs"], ["s_final", "outs"], body=body,
                                     num_scan_inputs=1, scan_input_directions=[1],
                                     scan_output_axes=[1])],
                   [_vi("s0", F, [2]), _vi("xs", F, [4, 2]), _vi("scale", F, [2])],
                   [_vi("s_final", F, [2]), _vi("outs", F, [2, 4])])
    rng = np.random.default_rng(0)
    feeds = {"s0": rng.standard_normal(2).astype(np.float32),
             "xs": rng.standard_normal((4, 2)).astype(np.float32),
             "scale": np.array([2.0, -0.5], np.float32)}
    _check(model, feeds, atol=1e-5)
    _roundtrip_matches(model, feeds)


def test_loop_body_that_does_not_type_check_names_the_node():
    # the body adds an int64 to a float: its Add refuses, and the error names the Loop node
    model = _loop_model(body_add_dtype=I64)
    with pytest.raises(ShapeError, match="my_loop.*body.*does not type-check"):
        rep = backend.prepare(model)
        rep.run([np.array(2, np.int64), np.ones(3, np.float32), np.ones(3, np.float32)])


def test_if_whose_branches_disagree_in_dtype_names_the_node():
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "then", [],
                             [_vi("a", F, [2])])
    other = helper.make_graph([helper.make_node("Cast", ["x"], ["b"], to=I64)], "else", [],
                              [_vi("b", I64, [2])])
    model = _model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other,
                                     name="my_if")],
                   [_vi("c", B, []), _vi("x", F, [2])], [_vi("y", F, [2])])
    with pytest.raises(ShapeError, match="my_if.*branches must agree"):
        rep = backend.prepare(model)
        rep.run([np.array(True), np.ones(2, np.float32)])


def test_subgraphs_nested_too_deep_are_refused(monkeypatch):
    from portable.io.onnx import importer

    monkeypatch.setattr(importer, "MAX_SUBGRAPH_DEPTH", 3)
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y0"])], "g0", [],
                             [_vi("y0", F, [1])])
    inner = leaf
    for depth in range(5):
        inner = helper.make_graph(
            [helper.make_node("If", ["c"], [f"y{depth + 1}"], then_branch=inner,
                              else_branch=leaf)],
            f"g{depth + 1}", [], [_vi(f"y{depth + 1}", F, [1])])
    model = _model(list(inner.node), [_vi("c", B, []), _vi("x", F, [1])],
                   [_vi(inner.output[0].name, F, [1])])
    with pytest.raises(GraphError, match="nested more than 3 deep"):
        import_graph(model.SerializeToString())


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    def varint(value: int) -> bytes:
        out = bytearray()
        while True:
            byte, value = value & 0x7F, value >> 7
            out.append(byte | (0x80 if value else 0))
            if not value:
                return bytes(out)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def test_hostile_nesting_past_the_readers_stack_is_a_clean_error():
    # Graph{node{attribute{g: Graph{...}}}} nested far past Python's recursion limit, which
    # protobuf's own writers refuse to build: written by hand.
    graph = b""
    for _ in range(600):
        graph = _field(1, _field(5, _field(6, graph)))  # Graph.node.attribute.g
    model = _field(7, graph)  # Model.graph
    with pytest.raises(SerializationError, match="nested too deeply"):
        import_graph(model)


def _roundtrip_matches(model, feeds, atol=1e-5):
    """Import, export again, and run the export in onnxruntime against the original."""
    from exporters.onnx.exporter import export_graph

    ort = pytest.importorskip("onnxruntime")
    graph, params = import_graph(model.SerializeToString())
    exported = export_graph(graph, params, opset=21)
    for node in exported.graph.node:  # the outer-scope references are implicit again
        if node.op_type == "Loop":
            assert len(node.input) == 3
    run = lambda m: ort.InferenceSession(  # noqa: E731
        m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, expected in zip(run(exported), run(model)):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=atol)


def test_loop_exports_with_outer_scope_references():
    feeds = {"M": np.array(3, np.int64), "x": np.array([1.0, 2.0, -1.0], np.float32),
             "v": np.array([0.5, -1.0, 2.0], np.float32)}
    _roundtrip_matches(_loop_model(), feeds)


def test_scan_version_8_with_batch_axis_matches_onnxruntime():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x_t"], ["s2"]),
         helper.make_node("Mul", ["s2", "x_t"], ["out_t"])],
        "body", [_vi("s", F, [2]), _vi("x_t", F, [2])], [_vi("s2", F, [2]), _vi("out_t", F, [2])])
    model = _model([helper.make_node("Scan", ["", "s0", "xs"], ["s_final", "outs"], body=body,
                                     num_scan_inputs=1, directions=[1])],
                   [_vi("s0", F, [3, 2]), _vi("xs", F, [3, 4, 2])],
                   [_vi("s_final", F, [3, 2]), _vi("outs", F, [3, 4, 2])], opset=8)
    rng = np.random.default_rng(1)
    feeds = {"s0": rng.standard_normal((3, 2)).astype(np.float32),
             "xs": rng.standard_normal((3, 4, 2)).astype(np.float32)}
    _check(model, feeds, atol=1e-5)


def test_cse_renaming_a_captured_value_still_exports_and_runs():
    from exporters.onnx.exporter import export_graph
    from portable.passes.cse import eliminate_common_subexpressions
    from portable.passes.prune import prune
    from portable.passes.verify import verify

    ort = pytest.importorskip("onnxruntime")
    model = _loop_model()
    graph = model.graph
    # a second, equal producer of the captured value: CSE merges it into the first
    extra = helper.make_node("Neg", ["v"], ["w_first"])
    del graph.node[:]
    graph.node.extend([extra] + list(_loop_model().graph.node))
    imported, params = import_graph(model.SerializeToString())
    merged = prune(eliminate_common_subexpressions(imported))
    loop = next(n for n in merged.nodes if n.op == "Loop")
    assert loop.inputs[-1] == "w_first" and loop.attrs["body"].captures == ("w",)
    verify(merged)
    feeds = {"M": np.array(3, np.int64), "x": np.array([1.0, 2.0, -1.0], np.float32),
             "v": np.array([0.5, -1.0, 2.0], np.float32)}
    exported = export_graph(merged, params, opset=21)
    run = lambda m: ort.InferenceSession(  # noqa: E731
        m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, expected in zip(run(exported), run(model)):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
