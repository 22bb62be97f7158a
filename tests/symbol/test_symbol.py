"""The Symbol API: structure queries, shape inference, JSON, and bind errors."""
import json

import numpy as np
import pytest

import portable as pt
from portable import sym
from portable.errors import BindError, SerializationError, ShapeError, UnknownOpError
from portable.models.symbolic import lenet, mlp


def bn_net():
    x = sym.var("data")
    h = sym.Convolution(x, kernel=(3, 3), num_filter=4, pad=(1, 1), name="conv")
    h = sym.BatchNorm(h, name="bn")
    h = sym.Activation(h, act_type="relu", name="act")
    return sym.FullyConnected(h, num_hidden=3, name="fc")


def test_lists_arguments_outputs_and_auxiliary_states():
    net = bn_net()
    assert net.list_arguments() == ["data", "conv_weight", "conv_bias", "bn_gamma", "bn_beta",
                                    "fc_weight", "fc_bias"]
    assert net.list_auxiliary_states() == ["bn_moving_mean", "bn_moving_var"]
    assert net.list_outputs() == ["fc_output"]


def test_infer_shape_and_type_follow_the_data_shape():
    args, outs, aux = lenet().infer_shape(data=(5, 1, 8, 8))
    shapes = dict(zip(lenet().list_arguments(), args))
    assert shapes["conv1_weight"] == (16, 1, 3, 3)
    assert shapes["conv2_weight"] == (32, 16, 3, 3)
    assert shapes["fc1_weight"] == (64, 32 * 2 * 2)
    assert outs == [(5, 10)] and aux == []
    arg_types, out_types, _ = sym.var("x", shape=(2, 3)).__mul__(2.0).infer_type()
    assert arg_types == [np.float32] and out_types == [np.float32]


def test_group_and_indexing_select_outputs():
    x = sym.var("x")
    a, b = sym.relu(x, name="a"), sym.neg(x, name="b")
    g = sym.Group([a, b])
    assert g.list_outputs() == ["a_output", "b_output"]
    exe = g.bind(pt.cpu(), {"x": pt.nd.array([-1.0, 2.0])})
    out_a, out_b = exe.forward()
    np.testing.assert_array_equal(out_a.asnumpy(), [0.0, 2.0])
    np.testing.assert_array_equal(out_b.asnumpy(), [1.0, -2.0])
    assert g[1].list_outputs() == ["b_output"] and g["a_output"].name == "a"


def test_json_round_trip_gives_the_same_outputs(tmp_path):
    net = mlp()
    args, _, _ = net.infer_shape(data=(4, 1, 8, 8))
    rng = np.random.default_rng(0)
    arrays = {n: pt.nd.array(rng.standard_normal(s).astype(np.float32))
              for n, s in zip(net.list_arguments(), args)}
    expected = net.bind(pt.cpu(), arrays).forward()[0].asnumpy()
    path = tmp_path / "mlp-symbol.json"
    net.save(str(path))
    loaded = sym.load(str(path))
    assert loaded.list_arguments() == net.list_arguments()
    assert loaded.tojson() == net.tojson()
    got = loaded.bind(pt.cpu(), arrays).forward()[0].asnumpy()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("text, message", [
    ("{not json", "not valid JSON"),
    ('{"format": "other"}', "not a portable symbol file"),
    ('{"format": "portable.symbol", "version": 99, "nodes": [], "heads": []}', "version 99"),
    ('{"format": "portable.symbol", "version": 1, "nodes": [{"op": "Relu", "name": "r", '
     '"inputs": [[3, 0]]}], "heads": [[0, 0]]}', "node #3, which is not defined"),
    ('{"format": "portable.symbol", "version": 1, "nodes": [], "heads": []}', "no outputs"),
    ('{"format": "portable.symbol", "version": 1, "nodes": [{"name": "x"}], "heads": []}',
     "malformed symbol JSON"),
])
def test_malformed_symbol_json_is_refused_with_a_clear_error(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(SerializationError, match=message) as info:
        sym.load(str(path))
    assert str(path) in str(info.value)


def test_unknown_op_in_json_is_named():
    doc = {"format": "portable.symbol", "version": 1,
           "nodes": [{"op": None, "name": "x"},
                     {"op": "Frobnicate", "name": "f", "inputs": [[0, 0]]}],
           "heads": [[1, 0]]}
    with pytest.raises(SerializationError, match="Frobnicate"):
        sym.fromjson(json.dumps(doc))


def test_bind_with_a_wrong_weight_shape_names_node_op_and_shapes():
    net = sym.FullyConnected(sym.var("data"), num_hidden=3, name="fc")
    args = {"data": pt.nd.zeros((2, 5)), "fc_weight": pt.nd.zeros((3, 4)),
            "fc_bias": pt.nd.zeros((3,))}
    with pytest.raises(ShapeError) as info:
        net.bind(pt.cpu(), args)
    message = str(info.value)
    assert "'fc'" in message and "Gemm" in message
    assert "(2, 5)" in message and "(3, 4)" in message


def test_bind_reports_missing_and_unknown_arguments():
    net = sym.relu(sym.var("x"))
    with pytest.raises(BindError, match="no array given for argument.*'x'"):
        net.bind(pt.cpu(), {})
    with pytest.raises(BindError, match="unknown argument"):
        net.bind(pt.cpu(), {"x": pt.nd.zeros((2,)), "y": pt.nd.zeros((2,))})


def test_infer_shape_without_a_shape_names_the_argument():
    net = sym.gemm(sym.var("x"), sym.var("w"))
    with pytest.raises(BindError, match="'w'"):
        net.infer_shape(x=(2, 3))


def test_unknown_symbol_function_or_op():
    with pytest.raises(UnknownOpError, match="Rleu"):
        sym.apply_op("Rleu", [sym.var("x")])


def test_python_scalars_take_the_other_operands_dtype_and_survive_json():
    x = sym.var("x", dtype="float64")
    y = sym.fromjson((2.0 - x * 3.0).tojson())
    out = y.bind(pt.cpu(), {"x": pt.nd.array(np.array([1.0, 2.0]), dtype=np.float64)})
    result = out.forward()[0]
    assert result.dtype == np.float64
    np.testing.assert_array_equal(result.asnumpy(), [-1.0, -4.0])
    assert isinstance(sym.constant(0.5), sym.Symbol)
