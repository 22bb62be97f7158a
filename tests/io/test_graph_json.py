"""IR Graph <-> JSON: every attribute kind survives a trip through JSON text (compared field by
field with the original graph), and malformed documents are refused naming source and field."""
import copy
import json
import math

import numpy as np
import pytest

from portable.errors import SerializationError, UnknownOpError
from portable.io.graph_json import graph_from_dict, graph_to_dict
from portable.io.json_values import decode_value, encode_value
from portable.ir.graph import Graph, Node, TensorType


def _every_attr_kind_graph() -> Graph:
    """A graph whose nodes carry int, float, string, ints, floats, strings and tensor attributes
    (tensors of several dtypes and ranks, 0-d included), inputs with unknown dims and
    initializers of several dtypes."""
    weights = {
        "w": np.arange(8 * 3 * 3 * 3, dtype=np.float32).reshape(8, 3, 3, 3) / 100,
        "b": np.linspace(-1, 1, 8, dtype=np.float32),
        "shape": np.array([0, -1], dtype=np.int64),
        "lstm_w": np.ones((1, 8, 2), np.float32), "lstm_r": np.ones((1, 8, 2), np.float32),
        "flag": np.array(True),
    }
    nodes = (
        Node("Conv", ("x", "w", "b"), ("c",), {"strides": (1, 1), "pads": (1, 1, 1, 1),
                                               "group": 1, "auto_pad": "NOTSET"}, "conv"),
        Node("LeakyRelu", ("c",), ("r",), {"alpha": 0.125}, "leaky"),
        Node("Reshape", ("r", "shape"), ("flat",), {}, "flatten"),
        Node("Gemm", ("flat", "flat"), ("g",), {"alpha": 1.0, "beta": 0.0, "transB": 1}, "gemm"),
        Node("LSTM", ("seq", "lstm_w", "lstm_r"), ("ys", "", ""),
             {"hidden_size": 2, "activations": ("Sigmoid", "Tanh", "Tanh"),
              "activation_alpha": (0.5, 1.5, -2.0), "direction": "forward"}, "lstm"),
        Node("Constant", (), ("k16",), {"value": np.array([[1.5, -2.25]], np.float16)}, "k16"),
        Node("Constant", (), ("k0",), {"value": np.array(-7, np.int64)}, "k0"),
        Node("Constant", (), ("kb",), {"value": np.array([True, False])}, "kb"),
        Node("Constant", (), ("ki",), {"value": np.array([np.iinfo(np.int64).min,
                                                          np.iinfo(np.int64).max])}, "ki"),
        Node("Constant", (), ("kf",), {"value_floats": (0.1, 1e-30, 3.0)}, "kf"),
        Node("Constant", (), ("ks",), {"value_strings": ("a", "ü", "")}, "ks"),
        Node("Constant", (), ("kn",), {"value_ints": ()}, "kn"),
        Node("ConstantOfShape", ("shape",), ("zeros",),
             {"value": np.array([0.0], np.float64)}, "zeros"),
    )
    return Graph(nodes=nodes, inputs=(("x", TensorType((None, 3, 5, 5), "float32")),
                                      ("seq", TensorType((4, None, 2), "float32"))),
                 outputs=("g", "ys", "k16", "k0", "kb", "ki", "kf", "ks", "kn", "zeros"),
                 initializers=weights, name="every-kind")


def _round_trip(graph: Graph) -> Graph:
    text = json.dumps(graph_to_dict(graph))
    return graph_from_dict(json.loads(text), dict(graph.initializers), source="g.json")


def _assert_same_graph(got: Graph, want: Graph) -> None:
    assert got.name == want.name
    assert got.inputs == want.inputs and got.outputs == want.outputs
    assert list(got.initializers) == list(want.initializers)
    for name, array in want.initializers.items():
        assert got.initializers[name] is array  # passed back, not copied
    assert len(got.nodes) == len(want.nodes)
    for mine, theirs in zip(got.nodes, want.nodes):
        assert mine == theirs  # op, inputs, outputs, name and attrs (arrays by dtype + value)
        for key, value in theirs.attrs.items():
            decoded = mine.attrs[key]
            assert type(decoded) is type(value), (mine.name, key)
            if isinstance(value, tuple):
                assert [type(v) for v in decoded] == [type(v) for v in value], (mine.name, key)
            if isinstance(value, np.ndarray):
                assert decoded.shape == value.shape and decoded.dtype == value.dtype


def test_every_attribute_kind_survives_json():
    graph = _every_attr_kind_graph()
    _assert_same_graph(_round_trip(graph), graph)


def test_unknown_dims_are_null_and_initializers_are_named_not_inlined():
    doc = graph_to_dict(_every_attr_kind_graph())
    assert doc["inputs"][0] == {"name": "x", "shape": [None, 3, 5, 5], "dtype": "float32"}
    assert {"name": "w", "shape": [8, 3, 3, 3], "dtype": "float32"} in doc["initializers"]
    text = json.dumps(doc)
    assert "0.0199" not in text  # a weight value (w[0,0,0,2]) is not in the JSON


def test_non_finite_float_attributes_survive():
    graph = Graph(nodes=(Node("Constant", (), ("k",), {"value_floats": (math.inf, -math.inf,
                                                                        math.nan)}),),
                  inputs=(), outputs=("k",))
    got = _round_trip(graph).nodes[0].attrs["value_floats"]
    assert got[0] == math.inf and got[1] == -math.inf and math.isnan(got[2])


def test_values_json_cannot_hold_are_refused_naming_node_and_attribute():
    graph = Graph(nodes=(Node("Constant", (), ("k",), {"value": np.array(["a"])}, "const"),),
                  inputs=(), outputs=("k",))
    with pytest.raises(SerializationError, match="node 'const'.*attribute 'value'"):
        graph_to_dict(graph)


def _bad(path, value):
    """Set ``doc[path...] = value`` (or delete the key when value is ...) in a copy."""
    def mutate(doc):
        doc = copy.deepcopy(doc)
        target = doc
        for key in path[:-1]:
            target = target[key]
        if value is ...:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return doc
    return mutate


def _node_index(name):
    return next(i for i, n in enumerate(_every_attr_kind_graph().nodes) if n.name == name)


CONV, GEMM, K16 = _node_index("conv"), _node_index("gemm"), _node_index("k16")
CORRUPTIONS = {
    "not an object": (lambda doc: [doc], "not an object"),
    "format tag": (_bad(["format"], "other"), "not a portable graph"),
    "version": (_bad(["version"], 2), "version 2 is not supported"),
    "nodes missing": (_bad(["nodes"], ...), "\"nodes\" is missing"),
    "nodes not a list": (_bad(["nodes"], {}), "\"nodes\" must be a list"),
    "node not an object": (_bad(["nodes", 0], "Conv"), "nodes\\[0\\]: expected a JSON object"),
    "op missing": (_bad(["nodes", CONV, "op"], ...), "node 'conv': field \"op\" is missing"),
    "op not a string": (_bad(["nodes", CONV, "op"], 3), "node 'conv': \"op\" must be a string"),
    "inputs not strings": (_bad(["nodes", GEMM, "inputs"], ["flat", 1]),
                           "node 'gemm': \"inputs\" must be a list of strings"),
    "unknown attribute": (_bad(["nodes", CONV, "attrs", "speed"], 3),
                          "node 'conv'.*unknown attribute.*speed"),
    # a string where an int flag belongs would run as true: transB "0" as transB=1
    "int attribute as string": (_bad(["nodes", GEMM, "attrs", "transB"], "0"),
                                "node 'gemm'.*attribute 'transB' must be int, got str '0'"),
    "float attribute as list": (_bad(["nodes", GEMM, "attrs", "alpha"], [1.0]),
                                "node 'gemm'.*attribute 'alpha' must be float"),
    "ints attribute as int": (_bad(["nodes", CONV, "attrs", "strides"], 1),
                              "node 'conv'.*attribute 'strides' must be ints"),
    "bad tensor attribute": (_bad(["nodes", K16, "attrs", "value", "__tensor__", "data"], [1]),
                             "node 'k16'.*attribute 'value'.*holds 1 elements, not 2"),
    "tensor dtype": (_bad(["nodes", K16, "attrs", "value", "__tensor__", "dtype"], "float99"),
                     "node 'k16'.*unknown dtype 'float99'"),
    "input shape": (_bad(["inputs", 0, "shape"], [-1, 3]),
                    "inputs\\[0\\] \\('x'\\): \"shape\" must be a list of non-negative"),
    "input dtype": (_bad(["inputs", 0, "dtype"], "complex64"), "not a number or bool type"),
    "unknown dtype": (_bad(["inputs", 0, "dtype"], "nope"), "unknown dtype 'nope'"),
    "duplicate input": (lambda doc: {**doc, "inputs": doc["inputs"] * 2}, "listed twice"),
    "dangling input": (_bad(["nodes", GEMM, "inputs"], ["flat", "ghost"]),
                       "reads 'ghost', which no node, input or initializer defines"),
    "wrong arity": (_bad(["nodes", GEMM, "inputs"], ["flat"]), "node 'gemm'.*has 1 inputs"),
    "initializer missing": (lambda doc: {**doc, "initializers": doc["initializers"] + [
        {"name": "extra_w", "shape": [1], "dtype": "float32"}]},
        "initializer\\(s\\) \\['extra_w'\\] that the graph needs are missing"),
    "initializer mistyped": (_bad(["initializers", 0, "shape"], [8, 3, 3, 1]),
                             "initializer 'w' is float32\\[8, 3, 3, 3\\]; the graph records"),
    "initializer extra": (lambda doc: {**doc, "initializers": doc["initializers"][1:]},
                          "\\['w'\\] are not initializers of the graph"),
}


@pytest.mark.parametrize("case", CORRUPTIONS)
def test_malformed_documents_are_refused_naming_source_and_field(case):
    graph = _every_attr_kind_graph()
    mutate, pattern = CORRUPTIONS[case]
    doc = mutate(json.loads(json.dumps(graph_to_dict(graph))))
    with pytest.raises(SerializationError, match=pattern) as info:
        graph_from_dict(doc, dict(graph.initializers), source="model.json")
    assert str(info.value).startswith("model.json: ")


def test_unknown_op_is_the_registry_error_naming_source_and_node():
    graph = _every_attr_kind_graph()
    doc = graph_to_dict(graph)
    doc["nodes"][CONV]["op"] = "Convv"
    with pytest.raises(UnknownOpError, match="model.json: node 'conv'.*'Convv'.*did you mean Conv"):
        graph_from_dict(doc, dict(graph.initializers), source="model.json")


def test_json_values_round_trip_and_checks():
    value = {"a": (1, 2.5, "s", None, True), "t": np.arange(6, dtype=np.uint16).reshape(2, 3)}
    back = decode_value(json.loads(json.dumps(encode_value(value))))
    assert back["a"] == [1, 2.5, "s", None, True]
    assert back["t"].dtype == np.uint16 and np.array_equal(back["t"], value["t"])
    with pytest.raises(SerializationError, match="flat list"):
        decode_value({"__tensor__": {"dtype": "int8", "shape": [2], "data": [[1], [2]]}})
    with pytest.raises(SerializationError, match="needs \"dtype\", \"shape\" and \"data\""):
        decode_value({"__tensor__": {"dtype": "int8"}})
    with pytest.raises(SerializationError, match="cannot store a object value|cannot store"):
        encode_value(object())
