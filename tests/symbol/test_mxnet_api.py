"""MXNet 1.x's symbol functions (``portable.symbol.mxnet_api``) beyond the recorded answers:
errors that name the call, positional composition, and the ONNX-style calls portable makes
with the names whose MXNet meaning differs. Expected values come from NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import portable as mx
from portable.errors import BindError, OpError
from portable.symbol.mxnet_api import SIGNATURES
from portable.symbol.mxnet_converters import CONVERTERS


def test_every_signature_has_a_converter():
    assert sorted(set(SIGNATURES) - set(CONVERTERS)) == []


def test_a_bad_call_names_the_call_not_a_file():
    x = mx.sym.var("x")
    with pytest.raises(OpError, match=r"mx\.sym\.LeakyReLU: node 'lr'.*act_type"):
        mx.sym.LeakyReLU(x, act_type="nope", name="lr")
    with pytest.raises(OpError, match=r"mx\.sym\.slice_axis"):
        mx.sym.slice_axis(x, axis="one", begin=0, end=1)
    with pytest.raises(OpError, match=r"mx\.sym\.dot: input 'rhs' must be a Symbol"):
        mx.sym.dot(x, 2.0)
    with pytest.raises(OpError, match=r"mx\.sym\.Concat has no input named 'weight'"):
        mx.sym.Concat(x, x, weight=x)


def test_positional_composition_follows_list_arguments():
    p, q, r = mx.sym.var("p"), mx.sym.var("q"), mx.sym.var("r")
    composed = (p - q)(r, p)
    assert composed.list_arguments() == ["r", "p"]
    got = composed.eval(r=mx.nd.array([5.0]), p=mx.nd.array([2.0]))[0].asnumpy()
    np.testing.assert_allclose(got, [3.0])
    with pytest.raises(BindError, match="not both"):
        (p - q)(r, q=p)
    with pytest.raises(BindError, match="'nope' not found"):
        (p - q)(nope=r)


def test_composition_keeps_scalars_typed_like_their_operand():
    x, y = mx.sym.var("x"), mx.sym.var("y")
    composed = (x * 2.0)(x=y)
    out = composed.eval(y=mx.nd.array([1.5], dtype="float64"))[0]
    assert out.dtype == np.float64 and out.asnumpy().tolist() == [3.0]


def test_onnx_style_calls_keep_their_meaning():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 10, np.float32)
    p, q = mx.sym.var("p"), mx.sym.var("q")
    args = {"p": mx.nd.array(a), "q": mx.nd.array(b)}
    np.testing.assert_allclose(mx.sym.sum(p, q).eval(**args)[0].asnumpy(), a + b)
    np.testing.assert_allclose(mx.sym.max(p, q).eval(**args)[0].asnumpy(), np.maximum(a, b))
    shape = mx.sym.shape(q)
    np.testing.assert_allclose(mx.sym.reshape(mx.sym.flatten(p, axis=0), shape)
                               .eval(**args)[0].asnumpy(), a)
    # and MXNet's meaning otherwise
    np.testing.assert_allclose(mx.sym.sum(p, axis=0).eval(p=args["p"])[0].asnumpy(), a.sum(0))


def test_user_attributes_stay_on_the_node_and_do_not_change_the_graph():
    x = mx.sym.var("x")
    s = mx.sym.Concat(x, x, dim=0, attr={"__ctx_group__": "dev1"})
    assert s.attr("ctx_group") == "dev1" and s.attr("dim") == "0"
    out = s.eval(x=mx.nd.array([1.0]))[0].asnumpy()
    np.testing.assert_allclose(out, [1.0, 1.0])
