"""Attention and RotaryEmbedding beyond the op table: refusals name the node, the op and what
does not fit; imperative autograd runs the same gradient rule as symbolic autodiff."""
import re

import numpy as np
import pytest

from portable import autograd, nd
from portable.errors import ShapeError
from portable.ndarray.invoke import invoke
from tests.ops.harness import Case, rand, run_ours, symbolic_gradients, to64

_Q4 = rand(1, 2, 3, 4)


@pytest.mark.parametrize("inputs, attrs, message", [
    ([rand(2, 4, 8)] * 3, {}, "need both q_num_heads and kv_num_heads"),
    ([rand(2, 4, 8)] * 3, {"q_num_heads": 3, "kv_num_heads": 1},
     "hidden size 8 is not a multiple of its 3 heads"),
    ([_Q4, rand(1, 3, 3, 4), rand(1, 3, 3, 4)], {}, "not a multiple of kv_num_heads"),
    ([_Q4, _Q4, _Q4], {"q_num_heads": 3}, "q_num_heads=3 disagrees"),
    ([_Q4, _Q4, _Q4, np.zeros((3, 5), np.float32)], {}, "at most 3 (past + new) keys"),
    ([_Q4, _Q4, _Q4, np.zeros((3, 3), np.int32)], {}, "attn_mask must be bool"),
    ([_Q4, _Q4, _Q4, None, rand(1, 2, 2, 4)], {}, "given together"),
    ([_Q4, _Q4, _Q4, None, rand(1, 2, 2, 4), rand(1, 2, 2, 4), np.array([1], np.int64)], {},
     "cannot be combined"),
    ([_Q4, _Q4, _Q4], {"softmax_precision": 16}, "softmax_precision=16"),
    ([_Q4, _Q4, _Q4], {"left_window_size": -2}, "left_window_size=-2"),
])
def test_attention_refusals_say_what_does_not_fit(inputs, attrs, message):
    with pytest.raises(ShapeError, match=r"op Attention\).*" + re.escape(message)):
        run_ours(Case("Attention", inputs, attrs=attrs))


@pytest.mark.parametrize("inputs, attrs, message", [
    ([rand(2, 3, 16), rand(6, 4), rand(6, 4)], {}, "needs num_heads"),
    ([rand(2, 2, 3, 8), rand(6, 2), rand(6, 2), np.zeros((2, 3), np.int64)],
     {"rotary_embedding_dim": 6}, "cos_cache (6, 2) must be (max position, 3)"),
    ([rand(2, 2, 3, 8), rand(6, 4), rand(6, 4)], {}, "without position_ids"),
    ([rand(2, 2, 3, 8), rand(6, 2), rand(6, 2), np.zeros((2, 3), np.int64)],
     {"rotary_embedding_dim": 3}, "must be even"),
])
def test_rotary_refusals_say_what_does_not_fit(inputs, attrs, message):
    with pytest.raises(ShapeError, match=r"op RotaryEmbedding\).*" + re.escape(message)):
        run_ours(Case("RotaryEmbedding", inputs, attrs=attrs))


def test_imperative_gradient_matches_symbolic_autodiff():
    # grouped-query, causal, softcapped, 3-D layout, with the cache
    attrs = {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1, "softcap": 0.7}
    case = to64(Case("Attention", [rand(2, 3, 16), rand(2, 2, 8, seed=1), rand(2, 2, 8, seed=2),
                                   None, rand(2, 2, 3, 4, seed=3), rand(2, 2, 3, 4, seed=4)],
                     attrs=attrs))
    heads = [np.random.default_rng(5).uniform(0.5, 1.5, (2, 3, 16))]
    wrt, expected = symbolic_gradients(case, heads)
    arrays = {i: nd.array(case.inputs[i], dtype=np.float64) for i in wrt}
    for array in arrays.values():
        array.attach_grad()
    with autograd.record():
        y = invoke("Attention", [arrays.get(i) for i in range(6)], attrs)
        loss = (y * nd.array(heads[0], dtype=np.float64)).sum()
    loss.backward()
    for i, want in zip(wrt, expected):
        np.testing.assert_allclose(arrays[i].grad.asnumpy(), want, rtol=1e-10, atol=1e-12)
