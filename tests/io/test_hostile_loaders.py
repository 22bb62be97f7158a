"""Hostile files against every model reader (issue 21 item 5): each loader checks the types,
ranges and nesting of what it parses and raises portable's errors naming the file (and the
tensor, node or field), never RecursionError, OverflowError, a NumPy error or a silent
wrap-around. One section per finding of the security review, each with a case per loader:
safetensors tensor files, deployment files (graph JSON inside safetensors), symbol JSON and ONNX
(import, and the exporter's names). The files are built by hand or with ``onnx.helper``
(``hostile_files.py``), never with portable's writers.
"""
from __future__ import annotations

import json
import os
import tracemalloc

import numpy as np
import pytest

from portable.dtypes import MAX_DIM, MAX_ELEMENTS, dtype_named, shape_problem
from portable.errors import (GraphError, OpAttributeError, PortableError, SerializationError,
                             ShapeError)
from portable.io import tensors
from portable.io.json_records import MAX_DEPTH, parse_json
from portable.io.json_values import decode_value
from portable.io.onnx import reading, wire
from portable.io.onnx.importer import import_graph
from portable.predict import deployment
from portable.symbol import fromjson
from tests.io.hostile_files import (DELETE, WEIGHTS, deployment_bytes, edited, graph_doc,
                                    onnx_model, safetensors_bytes, symbol_doc, tensor_layout)

DEEP = "[" * 100_000  # what the review used: json.loads recursed until RecursionError
BAD_DTYPES = ["(", "float32;import os", "V99999999999", "f4,i8", "(2)f4", "O", "<U8", ">f4",
              "float128", "complex64", "", "Float32", "float32 "]
HUGE_SHAPES = [[2**32, 2**32, 16],  # 2**68 elements: np.prod wraps to 0 in int64
               [2**64, 0],          # a dim past int64 (OverflowError in NumPy)
               [0, 2**41, 2**41],   # zero elements, yet NumPy refuses the extent
               [2**62], [1] * 65,   # a dim past MAX_DIM; more dims than NumPy allows
               [-1, 3], [-5]]


def _load_deployment(tmp_path, data: bytes):
    path = tmp_path / "model.portable"
    path.write_bytes(data)
    return deployment.load(path), path


def _deployment_fails(tmp_path, data: bytes, pattern: str) -> SerializationError:
    path = tmp_path / "model.portable"
    path.write_bytes(data)
    with pytest.raises(SerializationError, match=pattern) as info:
        deployment.load(path)
    assert str(path) in str(info.value)
    return info.value


def _symbol_fails(doc_or_text, pattern: str) -> None:
    text = doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text)
    with pytest.raises(SerializationError, match=pattern) as info:
        fromjson(text, "net-symbol.json")
    assert "net-symbol.json" in str(info.value)


def _tensor_file_fails(header, pattern: str, body: bytes = b"") -> None:
    with pytest.raises(SerializationError, match=pattern) as info:
        tensors.parse_tensor_bytes(safetensors_bytes(header, body), "w.safetensors")
    assert "w.safetensors" in str(info.value)


def test_the_builders_make_valid_files(tmp_path):
    """Every case below damages one field of these; undamaged, each loads."""
    graph, _ = _load_deployment(tmp_path, deployment_bytes())
    assert [n.name for n in graph.nodes] == ["mm", "k", "add", "relu"]
    entries, body = tensor_layout(WEIGHTS)
    assert tensors.parse_tensor_bytes(safetensors_bytes(entries, body)).tensors["w"].shape == (3, 2)
    assert fromjson(json.dumps(symbol_doc())).infer_shape()[1] == [(2, 3)]
    assert import_graph(onnx_model().SerializeToString())[0].name == "tiny"


# -- finding 1: deeply nested JSON ----------------------------------------------------------------


@pytest.mark.parametrize("text", [DEEP, DEEP + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000,
                                  "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)])
def test_the_shared_parser_refuses_deep_nesting(text):
    with pytest.raises(SerializationError, match="doc.json: not valid JSON: nested more than"):
        parse_json(text, "doc.json")


def test_nesting_up_to_the_limit_parses():
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH, "doc.json") is not None


def test_deep_safetensors_header_is_refused():
    _tensor_file_fails(DEEP, "header is not valid JSON: nested more than")
    deep_entry = '{"w": {"dtype": "F32", "shape": ' + DEEP + "}"
    _tensor_file_fails(deep_entry, "nested more than")


def test_deep_verified_tensor_metadata_is_refused():
    entries, body = tensor_layout({})
    meta = {"format": "portable.tensors", "version": "1", "json": DEEP,
            "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
    with pytest.raises(SerializationError, match="ckpt: its metadata is not valid JSON: nested"):
        tensors.tensors_from_bytes(safetensors_bytes({"__metadata__": meta, **entries}, body),
                                   "ckpt")


@pytest.mark.parametrize("field", ["graph", "crc32", "metadata"])
def test_deep_json_in_a_deployment_file_is_refused(tmp_path, field):
    if field == "graph":
        data = deployment_bytes(DEEP)
    else:
        data = deployment_bytes(header_edit=lambda h: h["__metadata__"].update({field: DEEP}))
    path = tmp_path / "model.portable"
    path.write_bytes(data)
    with pytest.raises(SerializationError, match="nested more than") as info:
        deployment.describe(path) if field == "metadata" else deployment.load(path)
    assert str(path) in str(info.value)


def test_deep_attribute_value_in_a_deployment_graph_is_refused(tmp_path):
    text = json.dumps(graph_doc()).replace('"outputs": ["h"]}',
                                           '"outputs": ["h"], "attrs": {"x": ' + DEEP + '}}', 1)
    _deployment_fails(tmp_path, deployment_bytes(text), "nested more than")


def test_deep_symbol_file_is_refused(tmp_path):
    _symbol_fails(DEEP, "nested more than")
    text = json.dumps(symbol_doc()).replace('"attrs": {}', '"attrs": {"__a": ' + DEEP + "}", 1)
    _symbol_fails(text, "nested more than")
    path = tmp_path / "net-symbol.json"
    path.write_text(DEEP)
    from portable.symbol import load

    with pytest.raises(SerializationError, match="net-symbol.json: .*nested more than"):
        load(str(path))


# -- finding 2: dtype strings that are not dtypes -------------------------------------------------


@pytest.mark.parametrize("name", BAD_DTYPES + [3, None, ["float32"]])
def test_only_portables_dtype_names_are_dtypes(name):
    assert dtype_named(name) is None


def test_the_dtype_table_is_portables_dtypes():
    from portable.dtypes import FILE_DTYPES, ONNX_DTYPES

    from portable.dtypes import is_low_precision, is_string

    # (files name NumPy's own types: ml_dtypes' ones are not read from deployment files, and no
    # loader builds object arrays, which ONNX's strings are held in, from bytes)
    native = [d for d in ONNX_DTYPES.values() if not is_low_precision(d) and not is_string(d)]
    assert set(FILE_DTYPES.values()) == set(native)
    assert all(dtype_named(d.name) == d for d in native)


@pytest.mark.parametrize("name", BAD_DTYPES)
def test_a_bad_dtype_in_a_deployment_graph_is_refused(tmp_path, name):
    doc = edited(graph_doc(), ["inputs", 0, "dtype"], name)
    _deployment_fails(tmp_path, deployment_bytes(doc), r"inputs\[0\] \('x'\): unknown dtype")
    doc = edited(graph_doc(), ["nodes", 1, "attrs", "value", "__tensor__", "dtype"], name)
    _deployment_fails(tmp_path, deployment_bytes(doc), "node 'k'.*unknown dtype")


@pytest.mark.parametrize("name", BAD_DTYPES)
def test_a_bad_dtype_in_a_symbol_file_is_refused(name):
    _symbol_fails(edited(symbol_doc(), ["nodes", 0, "dtype"], name), "node 'x': unknown dtype")
    _symbol_fails(edited(symbol_doc(), ["nodes", 3, "attrs", "value", "__tensor__", "dtype"],
                         name), "node 'c'.*unknown dtype")


@pytest.mark.parametrize("name", BAD_DTYPES + ["float32", "f4", 7, None])
def test_a_bad_dtype_in_a_tensor_file_is_refused(name):
    entries, body = tensor_layout(WEIGHTS)
    entries["w"]["dtype"] = name
    _tensor_file_fails(entries, "tensor 'w': unknown dtype", body)


def test_a_bad_element_type_in_an_onnx_model_is_refused():
    from onnx import TensorProto, helper

    for code in (0, 14, 99, -1, 2**31 - 1):  # (14: COMPLEX64; 16 bfloat16 and 8 strings are held)
        inputs = [helper.make_tensor_value_info("x", code, ["batch", 3])]
        with pytest.raises(ShapeError, match="graph input 'x'.*element type"):
            import_graph(onnx_model(inputs=inputs).SerializeToString())
    bad = helper.make_tensor("b", TensorProto.FLOAT, [2], [0.5, -0.5])
    bad.data_type = 14  # COMPLEX64: not a portable element type
    with pytest.raises(ShapeError, match="initializer 'b'.*COMPLEX64 is not supported"):
        import_graph(onnx_model(initializers=[onnx_model().graph.initializer[0], bad])
                     .SerializeToString())


# -- finding 3: element counts that overflow 64 bits ----------------------------------------------


@pytest.mark.parametrize("shape", HUGE_SHAPES)
def test_shape_problem_counts_with_python_ints(shape):
    assert shape_problem(shape) is not None


def test_shape_problem_accepts_what_portable_uses():
    assert shape_problem([]) is None and shape_problem([0]) is None
    assert shape_problem([MAX_DIM - 1, 0]) is not None  # NumPy refuses the extent
    assert shape_problem([None, 3], unknown=True) is None and shape_problem([None, 3]) is not None
    assert shape_problem([-1, 3], minimum=-1) is None and shape_problem([-2], minimum=-1)
    assert shape_problem([True, 2]) is not None and shape_problem([2.0]) is not None
    assert shape_problem(np.array([2, 3], np.int64).tolist()) is None
    assert shape_problem("23") is not None and shape_problem({"0": 1}) is not None


@pytest.mark.parametrize("shape", HUGE_SHAPES)
def test_a_huge_shape_in_a_tensor_file_is_refused(shape):
    entries, body = tensor_layout(WEIGHTS)
    entries["huge"] = {"dtype": "F32", "shape": shape, "data_offsets": [len(body), len(body)]}
    _tensor_file_fails(entries, "tensor 'huge': shape .* is not a list of non-negative ints", body)


@pytest.mark.parametrize("shape", HUGE_SHAPES)
def test_a_huge_shape_in_a_deployment_graph_is_refused(tmp_path, shape):
    doc = edited(graph_doc(), ["inputs", 0, "shape"], shape)
    _deployment_fails(tmp_path, deployment_bytes(doc), r"inputs\[0\] \('x'\): \"shape\" must be")
    doc = edited(graph_doc(), ["nodes", 1, "attrs", "value", "__tensor__", "shape"], shape)
    _deployment_fails(tmp_path, deployment_bytes(doc), "node 'k'.*tensor value's shape")


@pytest.mark.parametrize("shape", HUGE_SHAPES[:5] + [[-2, 3], [3, -7]])
def test_a_huge_shape_in_a_symbol_file_is_refused(shape):
    _symbol_fails(edited(symbol_doc(), ["nodes", 0, "shape"], shape), "node 'x': \"shape\" must")
    _symbol_fails(edited(symbol_doc(), ["nodes", 3, "attrs", "value", "__tensor__", "shape"],
                         shape), "node 'c'.*tensor value's shape")


def test_symbol_variables_keep_minus_one_for_an_unknown_dim():
    symbol = fromjson(json.dumps(edited(symbol_doc(), ["nodes", 0, "shape"], [-1, 3])))
    assert symbol.get_internals() is not None


@pytest.mark.parametrize("shape", [[2**32, 2**32, 16], [0, 2**41, 2**41], [2**62],
                                   [2**63 - 1, 0], [1] * 65])  # (int64, as ONNX stores dims)
def test_a_huge_shape_in_an_onnx_model_is_refused(shape):
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch"] + shape)]
    with pytest.raises(ShapeError, match="<bytes>: graph input 'x': shape .*(large|range|dim)"):
        import_graph(onnx_model(inputs=inputs).SerializeToString())
    tensor = helper.make_tensor("b", TensorProto.FLOAT, [2], [0.5, -0.5])
    del tensor.dims[:]
    tensor.dims.extend(shape)
    with pytest.raises(ShapeError, match="initializer 'b': shape .*(large|range|dim)"):
        import_graph(onnx_model(initializers=[onnx_model().graph.initializer[0], tensor])
                     .SerializeToString())


def test_negative_onnx_dims_are_refused():
    from onnx import TensorProto, helper

    for dims in ([-1, 3], [3, -2], [-(2**63)]):
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
        with pytest.raises(ShapeError, match="graph input 'x': shape .*negative dimension"):
            import_graph(onnx_model(inputs=inputs).SerializeToString())


# -- finding 4: the ONNX element limit: 2**40 itself refused, checked before any allocation -----------------------


def test_the_onnx_element_limit_refuses_two_to_the_forty():
    assert MAX_ELEMENTS == reading.MAX_ELEMENTS == (1 << 40) - 1
    assert reading.checked_dims(np.array([MAX_ELEMENTS], np.int64), "t") == (MAX_ELEMENTS,)
    assert reading.checked_dims([1 << 20, (1 << 20) - 1], "t") == (1 << 20, (1 << 20) - 1)
    for dims in ([1 << 40], [1 << 20, 1 << 20, 1], [(1 << 20) + 1, 1 << 20], [0, 1 << 40]):
        with pytest.raises(ShapeError, match="t: shape .* at most 1099511627775 elements"):
            reading.checked_dims(dims, "t")


def _raw_tensor(name: str, dims: list, raw: bytes | None):
    """A float TensorProto made field by field (``helper.make_tensor`` checks sizes itself)."""
    from onnx import TensorProto

    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT)
    tensor.dims.extend(dims)
    if raw is not None:
        tensor.raw_data = raw
    return tensor


def _external(location: str, offset: str, length: str):
    from onnx import TensorProto

    tensor = _raw_tensor("w", [3, 2], None)
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def test_a_tensor_at_the_limit_is_refused_by_its_data_without_allocating():
    """2**40 - 1 float32 elements pass the count check; the 8 bytes of data behind them are refused
    before anything the size of the declared tensor is allocated."""
    tensor = _raw_tensor("b", [MAX_ELEMENTS], b"\0" * 8)
    typed = _raw_tensor("b", [1 << 20, (1 << 20) - 1], None)
    typed.float_data.extend([1.0, 2.0])
    for bad in (tensor, typed):
        model = onnx_model(initializers=[onnx_model().graph.initializer[0], bad])
        tracemalloc.start()
        try:
            with pytest.raises(SerializationError, match="initializer 'b': malformed tensor data"):
                import_graph(model.SerializeToString())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 << 20


# -- finding 5: lone surrogates in names on ONNX export -------------------------------------------


def _relu_graph(node="relu", value="y", graph="g", attr=None):
    from portable.ir.graph import Graph, Node, TensorType

    nodes = (Node("Relu", ("x",), (value,), {}, node),)
    if attr is not None:
        nodes = (Node("Cast", ("x",), ("c",), {"to": 1}, "cast"),
                 Node("Relu", ("c",), (value,), {}, node))
    return Graph(nodes=nodes, inputs=(("x", TensorType((2,), "float32")),),
                 outputs=(value,), initializers={}, name=graph)


@pytest.mark.parametrize("where, graph, pattern", [
    ("node name", _relu_graph(node="r\ud800"), r"node 'r\\ud800' \(op Relu\)"),
    ("output name", _relu_graph(value="y\udc00"), r"graph 'g': value name"),
    ("graph name", _relu_graph(graph="g\ud800"), "the graph's name"),
])
def test_a_lone_surrogate_is_refused_on_export_naming_the_node(where, graph, pattern):
    pytest.importorskip("onnx")
    from exporters.onnx.exporter import export_graph

    with pytest.raises(SerializationError, match=f"cannot export {pattern}.*lone surrogate"):
        export_graph(graph, opset=17)


def test_a_lone_surrogate_in_an_attribute_is_refused_on_export():
    pytest.importorskip("onnx")
    from exporters.onnx.exporter import _node_proto
    from portable.ir.graph import Node

    node = Node("onnx:Resize", ("x",), ("y",), {"mode": "near\ud800"}, "resize")
    with pytest.raises(SerializationError, match="node 'resize' .*attribute 'mode'"):
        _node_proto(node, "resize", 17)


@pytest.mark.parametrize("text", ['["\\ud800"]', '{"\\udfff": 1}', '"a\\udc00b"'])
def test_the_shared_parser_refuses_lone_surrogates(text):
    with pytest.raises(SerializationError, match="lone surrogate"):
        parse_json(text, "doc.json")
    assert parse_json('["\\ud83d\\ude00"]', "doc.json") == ["\U0001F600"]  # a pair is text


def test_a_lone_surrogate_in_a_deployment_or_symbol_name_is_refused(tmp_path):
    text = json.dumps(graph_doc()).replace('"name": "relu"', '"name": "relu\\ud800"')
    _deployment_fails(tmp_path, deployment_bytes(text), "lone surrogate")
    _symbol_fails(json.dumps(symbol_doc()).replace('"relu0"', '"relu\\udc00"'),
                  "lone surrogate")


# -- finding 6: a NUL byte in an external-data location -------------------------------------------


@pytest.mark.parametrize("location", ["w\x00.bin", "w.bin\x00../../etc/passwd", "\x00"])
def test_a_nul_byte_in_an_external_data_location_is_refused(tmp_path, location):
    (tmp_path / "w.bin").write_bytes(WEIGHTS["w"].tobytes())
    tensor = _external(location, "0", "24")
    model = onnx_model(initializers=[tensor, onnx_model().graph.initializer[1]])
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(SerializationError, match="tensor 'w': external data location .* is not "
                                                 "a relative file name"):
        import_graph(str(path))


@pytest.mark.parametrize("offset, length, pattern", [
    ("-8", "24", "lies outside"), ("0", "-1", "lies outside"), ("16", "24", "lies outside"),
    ("zero", "24", "bad external data offset"), ("0", "9" * 5000, "bad external data"),
    ("0", "23", "malformed tensor data")])
def test_bad_external_data_offsets_are_refused(tmp_path, offset, length, pattern):
    (tmp_path / "w.bin").write_bytes(WEIGHTS["w"].tobytes())
    tensor = _external("w.bin", offset, length)
    path = tmp_path / "model.onnx"
    path.write_bytes(onnx_model(initializers=[tensor, onnx_model().graph.initializer[1]])
                     .SerializeToString())
    with pytest.raises(SerializationError, match=pattern) as info:
        import_graph(str(path))
    assert str(path) in str(info.value)


# -- finding 7: everything else that is not what it claims ----------------------------------------


TENSOR_FILE_CASES = {
    "offsets negative": ({"dtype": "F32", "shape": [3, 2], "data_offsets": [-24, 0]},
                         "data_offsets .* is not a pair of non-negative ints"),
    "offsets bools": ({"dtype": "F32", "shape": [], "data_offsets": [False, True]},
                      "not a pair of non-negative ints"),
    "offsets floats": ({"dtype": "F32", "shape": [3, 2], "data_offsets": [0.0, 24.0]},
                       "not a pair"),
    "offsets three": ({"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 24, 48]},
                      "not a pair"),
    "offsets huge": ({"dtype": "F32", "shape": [3, 2], "data_offsets": [2**64, 2**64 + 24]},
                     "lie outside"),
    "shape a string": ({"dtype": "F32", "shape": "3,2", "data_offsets": [0, 24]},
                       "shape '3,2' is not a list"),
    "shape of bools": ({"dtype": "F32", "shape": [True, 6], "data_offsets": [0, 24]},
                       "is not a list of non-negative ints"),
    "shape of floats": ({"dtype": "F32", "shape": [3.0, 2], "data_offsets": [0, 24]},
                        "is not a list of non-negative ints"),
    "entry a list": ([0, 24], "its entry is not a JSON object"),
    "dtype a list": ({"dtype": ["F32"], "shape": [3, 2], "data_offsets": [0, 24]},
                     "unknown dtype"),
    "wrong size": ({"dtype": "F32", "shape": [3, 3], "data_offsets": [0, 24]}, "needs 36 bytes"),
}


@pytest.mark.parametrize("case", TENSOR_FILE_CASES)
def test_malformed_tensor_entries_are_refused(case):
    entry, pattern = TENSOR_FILE_CASES[case]
    entries, body = tensor_layout(WEIGHTS)
    entries["w"] = entry
    _tensor_file_fails(entries, f"tensor 'w': .*{pattern}", body)


@pytest.mark.parametrize("header, pattern", [
    ('{"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
     '"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', "key 'w' appears twice"),
    ('{"__metadata__": {"a": 1}}', "not an object of strings"),
    ('{"__metadata__": [1]}', "not an object of strings"),
    ("[1, 2]", "header is not a JSON object"),
    ('{"w": NaN}', "its entry is not a JSON object"),
    (b'{"\xff": 1}', "header is not valid JSON .*not UTF-8"),
    ('{"w": {"dtype": "U8", "shape": [' + "9" * 5000 + '], "data_offsets": [0, 1]}}',
     "not valid JSON"),
])
def test_malformed_tensor_headers_are_refused(header, pattern):
    _tensor_file_fails(header, pattern, b"\0\0\0\0\0\0\0\0")


def test_verified_tensor_metadata_must_be_an_object():
    meta = {"format": "portable.tensors", "version": "1", "json": "[1]",
            "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}
    with pytest.raises(SerializationError, match="ckpt: its metadata is a JSON list"):
        tensors.tensors_from_bytes(safetensors_bytes({"__metadata__": meta}), "ckpt")


GRAPH_CASES = {
    "name not a string": (["name"], 7, "\"name\" must be a string"),
    "node name not a string": (["nodes", 0, "name"], ["mm"], "\"name\" must be a string"),
    "node op not a string": (["nodes", 0, "op"], None, "\"op\" must be a string"),
    "inputs not a list": (["nodes", 0, "inputs"], "x,w", "must be a list of strings"),
    "outputs of ints": (["outputs"], [0], "must be a list of strings"),
    "attrs a list": (["nodes", 3, "attrs"], [1], "expected a JSON object"),
    "attr of the wrong kind": (["nodes", 3, "attrs"], {"alpha": "1"}, "unknown attribute"),
    "int attr a string": (["nodes", 1, "attrs", "value_int"], "3",
                          "attribute 'value_int' must be int"),
    "tensor attr a list": (["nodes", 1, "attrs", "value"], [1.0, 2.0],
                           "attribute 'value' must be tensor"),
    "tensor data strings": (["nodes", 1, "attrs", "value", "__tensor__", "data"], ["1", "2"],
                            "holds str '1'"),
    "tensor data None": (["nodes", 1, "attrs", "value", "__tensor__", "data"], [None, 1.0],
                         "holds NoneType"),
    "tensor data nested": (["nodes", 1, "attrs", "value", "__tensor__", "data"], [[1.0], [2.0]],
                           "holds list"),
    "tensor data too few": (["nodes", 1, "attrs", "value", "__tensor__", "data"], [1.0],
                            "holds 1 elements, not 2"),
    "tensor data overflows": (["nodes", 1, "attrs", "value", "__tensor__", "data"],
                              [1e300, 0.0], "not float32"),
    "tensor shape missing": (["nodes", 1, "attrs", "value", "__tensor__", "shape"], DELETE,
                             "needs \"dtype\", \"shape\" and \"data\""),
    "input twice": (["inputs"], [{"name": "x", "shape": [1, 3], "dtype": "float32"}] * 2,
                    "listed twice"),
    "input also an initializer": (["inputs"], [{"name": "x", "shape": [1, 3], "dtype": "float32"},
                                               {"name": "w", "shape": [3, 2], "dtype": "float32"}],
                                  "both graph inputs and initializers"),
    "value defined twice": (["nodes", 2, "outputs"], ["h"], "defined twice"),
    "input record a string": (["inputs", 0], "x", "expected a JSON object"),
    "version a string": (["version"], "1", "version '1' is not supported"),
}


@pytest.mark.parametrize("case", GRAPH_CASES)
def test_malformed_deployment_graphs_are_refused(tmp_path, case):
    path, value, pattern = GRAPH_CASES[case]
    _deployment_fails(tmp_path, deployment_bytes(edited(graph_doc(), path, value)), pattern)


def test_duplicate_keys_in_a_deployment_graph_are_refused(tmp_path):
    text = json.dumps(graph_doc()).replace('"op": "Relu"', '"op": "Relu", "op": "Exp"')
    _deployment_fails(tmp_path, deployment_bytes(text), "key 'op' appears twice")


@pytest.mark.parametrize("doc", [[], "graph", 3, None])
def test_describe_refuses_a_graph_that_is_not_a_document(tmp_path, doc):
    path = tmp_path / "model.portable"
    path.write_bytes(deployment_bytes(json.dumps(doc)))
    with pytest.raises(SerializationError, match="model.portable"):
        deployment.describe(path)
    for key, value in (("outputs", 5), ("nodes", 5), ("inputs", [3]), ("name", [])):
        path.write_bytes(deployment_bytes(edited(graph_doc(), [key], value)))
        with pytest.raises(SerializationError, match=f"model.portable: .*{key}"):
            deployment.describe(path)


SYMBOL_CASES = {
    "name twice": (["nodes", 2, "name"], "x", "node name 'x' is used twice"),
    "name an int": (["nodes", 2, "name"], 3, "\"name\" must be a string"),
    "num_outputs zero": (["nodes", 2, "num_outputs"], 0, "\"num_outputs\" must be 1 to"),
    "num_outputs huge": (["nodes", 2, "num_outputs"], 10**12, "\"num_outputs\" must be 1 to"),
    "num_outputs a bool": (["nodes", 2, "num_outputs"], True, "must be an integer"),
    "scalar a string": (["nodes", 2, "scalar"], "no", "\"scalar\" must be a bool"),
    "scalar on a Relu": (["nodes", 2, "scalar"], True, "\"scalar\" must be a bool"),
    "attr of the wrong kind": (["nodes", 5, "attrs", "axis"], "1", "attribute 'axis' must be int"),
    "unknown attr": (["nodes", 2, "attrs"], {"alpha": 1.0}, "unknown attribute"),
    "missing input": (["nodes", 4, "inputs"], [[2, 0]], "has 1 inputs"),
    "input ahead": (["nodes", 2, "inputs"], [[5, 0]], "not defined before it"),
    "input a string": (["nodes", 2, "inputs"], ["x"], "must be \\[node index, output index\\]"),
    "output out of range": (["heads"], [[6, 1]], "refers to output 1"),
    "negative head": (["heads"], [[-1, 0]], "refers to node #-1"),
    "hint rule unknown": (["nodes", 1, "shape_hint", "rule"], "__import__",
                          "unknown shape hint rule"),
    "hint params a list": (["nodes", 1, "shape_hint", "params"], [1], "must be an object"),
    "hint source bad": (["nodes", 1, "shape_hint", "source"], [9, 0], "refers to node #9"),
    "attrs a string": (["nodes", 0, "attrs"], "lr_mult=2", "expected a JSON object"),
    "op unknown": (["nodes", 2, "op"], "os.system", "os.system"),
    "nodes an object": (["nodes"], {}, "\"nodes\" must be a list"),
    "no heads": (["heads"], [], "no outputs"),
}


@pytest.mark.parametrize("case", SYMBOL_CASES)
def test_malformed_symbol_files_are_refused(case):
    path, value, pattern = SYMBOL_CASES[case]
    _symbol_fails(edited(symbol_doc(), path, value), pattern)


def test_duplicate_keys_in_a_symbol_file_are_refused():
    text = json.dumps(symbol_doc()).replace('"name": "relu0"', '"name": "relu0", "name": "x"')
    _symbol_fails(text, "key 'name' appears twice")


def _onnx_fails(model, error=PortableError, pattern="<bytes>"):
    with pytest.raises(error, match=pattern):
        import_graph(model.SerializeToString() if hasattr(model, "SerializeToString") else model)


def test_onnx_duplicate_names_are_refused():
    from onnx import TensorProto, helper, numpy_helper

    w, b = onnx_model().graph.initializer
    _onnx_fails(onnx_model(initializers=[w, b, numpy_helper.from_array(WEIGHTS["w"], "b")]),
                GraphError, "initializer 'b' is unnamed or defined twice")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    _onnx_fails(onnx_model(inputs=[x, x]), GraphError, "graph input 'x' .* declared twice")
    nodes = list(onnx_model().graph.node)
    nodes.insert(1, helper.make_node("Relu", ["x"], ["h"], name="again"))
    _onnx_fails(onnx_model(nodes=nodes), GraphError, "'h' is defined twice|defines 'h'|twice")


def test_onnx_attributes_of_the_wrong_kind_are_refused():
    from onnx import helper

    nodes = list(onnx_model().graph.node)
    nodes[3] = helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis="last")
    _onnx_fails(onnx_model(nodes=nodes), OpAttributeError, "attribute 'axis' has kind string")
    nodes[3] = helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=1)
    nodes[3].attribute.append(helper.make_attribute("axis", 0))
    _onnx_fails(onnx_model(nodes=nodes), OpAttributeError, "attribute 'axis' is given twice")
    nodes[3] = helper.make_node("Softmax", ["r"], ["y"], name="softmax", axes=[1])
    _onnx_fails(onnx_model(nodes=nodes), OpAttributeError, "unknown attribute 'axes'")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes | int) -> bytes:
    """One protobuf field: a varint (int payload) or length-delimited bytes."""
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _model_bytes(tensor: bytes) -> bytes:
    """A hand-encoded ModelProto: opset 17 and a graph with one initializer, ``tensor``."""
    return _field(7, _field(5, tensor) + _field(2, b"g")) + _field(8, _field(2, 17))


@pytest.mark.parametrize("tensor, pattern", [
    (_field(2, _varint(1)), "Tensor.data_type holds one number, but is written as a packed run"),
    (_field(1, 2) + _field(2, 1) + _field(8, b"b\xff"), "Tensor.name is not valid UTF-8"),
    (_field(1, 2) + _field(2, 1) + _field(9, b"\0" * 8) + b"\x4a\xff\xff\xff\xff\x0f",
     "runs past the end"),
    (_varint(2 << 3 | 3), "wire type 3"),
    (_field(1, 1 << 63) + _field(2, 1) + _field(8, b"t"), "shape .* negative dimension"),
    (_field(1, 2) + _field(2, 6) + _field(5, 1 << 40) + _field(5, 7) + _field(8, b"t"),
     "declares no outputs"),
])
def test_hand_encoded_onnx_protobuf_is_refused_with_our_errors(tensor, pattern):
    with pytest.raises(PortableError, match=pattern):
        import_graph(_model_bytes(tensor))


def test_an_int32_field_keeps_its_low_32_bits_as_protobuf_reads_it():
    """A varint past 32 bits in an int32 field once raised OverflowError out of the reader."""
    model = wire.parse_model(_model_bytes(_field(1, 2) + _field(2, 6) + _field(5, (1 << 40) | 5)
                                          + _field(5, 2**64 - 1)))
    tensor = model.graph.initializer[0]
    assert tensor.int32_data.tolist() == [5, -1]
    assert reading.tensor_to_array(tensor, "initializer").tolist() == [5, -1]


def test_a_sparse_initializer_without_values_is_refused():
    model = _field(7, _field(15, b"") + _field(2, b"g")) + _field(8, _field(2, 17))
    with pytest.raises(SerializationError, match="sparse initializers"):
        import_graph(model)


def test_an_onnx_file_that_is_not_a_regular_file_is_refused(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    os.mkfifo(tmp_path / "pipe.onnx")
    with pytest.raises(SerializationError, match="named pipe"):
        import_graph(str(tmp_path / "pipe.onnx"))


def test_decode_value_checks_tensor_records_with_python_ints():
    with pytest.raises(SerializationError, match="shape .*too large"):
        decode_value({"__tensor__": {"dtype": "int8", "shape": [2**32, 2**32, 16], "data": []}})
    with pytest.raises(SerializationError, match="holds bool"):
        decode_value({"__tensor__": {"dtype": "int8", "shape": [1], "data": [True]}})
    with pytest.raises(SerializationError, match="holds float"):
        decode_value({"__tensor__": {"dtype": "int64", "shape": [1], "data": [1.5]}})
    with pytest.raises(SerializationError, match="not uint8"):
        decode_value({"__tensor__": {"dtype": "uint8", "shape": [1], "data": [-1]}})
    assert decode_value({"__tensor__": {"dtype": "bool", "shape": [2],
                                        "data": [True, False]}}).tolist() == [True, False]
    assert decode_value({"__tensor__": {"dtype": "float16", "shape": [1, 1],
                                        "data": [1]}}).dtype == np.float16


def test_writers_refuse_names_their_readers_would_refuse(tmp_path):
    """A lone surrogate slips through json.dumps (as an escape); the deployment and symbol
    writers refuse it instead of writing a file that load refuses."""
    import portable.symbol as sym

    with pytest.raises(SerializationError, match=r"the symbol as JSON: .*'x\\ud800'"):
        sym.Activation(sym.var("x\ud800", shape=(2,)), act_type="relu").tojson()
    with pytest.raises(SerializationError, match=r"graph of .*model.portable: .*'r\\ud800'"):
        deployment.save(_relu_graph(node="r\ud800"), tmp_path / "model.portable")
    assert not (tmp_path / "model.portable").exists()
