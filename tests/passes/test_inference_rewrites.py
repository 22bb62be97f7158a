"""Inference rewrites: before/expected graphs, and folded parameters against NumPy."""
import json

import numpy as np

from portable.device import cpu
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder
from portable.passes import inference_rewrites as rules
from portable.passes.rewriter import rewrite
from tests.passes.structural import assert_graphs_equal

RNG = np.random.default_rng(0)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_identity_and_inference_dropout_are_removed():
    b = GraphBuilder("before")
    x = b.input("x", (2, 3))
    i = b.op("Identity", b.op("Relu", x))
    d = b.op("Dropout", i, b.const(np.float32(0.3)))
    before = b.build([b.op("Neg", d)])

    e = GraphBuilder("expected")
    x = e.input("x", (2, 3))
    expected = e.build([e.op("Neg", e.op("Relu", x))])
    assert_graphs_equal(rewrite(before, rules.ELIMINATE_NOOPS), expected)


def test_training_dropout_and_graph_outputs_stay():
    b = GraphBuilder("g")
    x = b.input("x", (2, 3))
    d, _ = b.op("Dropout", x, b.const(np.float32(0.3)), outputs=2, training_mode=1)
    i = b.op("Identity", b.op("Relu", d))
    g = b.build([i])  # the Identity's output is the graph's output: renaming it is refused
    assert [n.op for n in rewrite(g, rules.ELIMINATE_NOOPS).nodes] == ["Dropout", "Relu",
                                                                       "Identity"]


def _conv_bn(bias: bool):
    w, cb = _rand(4, 3, 3, 3), _rand(4)
    scale, beta, mean = _rand(4), _rand(4), _rand(4)
    var = np.abs(_rand(4)) + 0.5
    b = GraphBuilder("before")
    x = b.input("x", (2, 3, 8, 8))
    conv_inputs = [x, b.const(w)] + ([b.const(cb)] if bias else [])
    y = b.op("Conv", *conv_inputs, pads=[1, 1, 1, 1])
    y = b.op("BatchNormalization", y, *(b.const(v) for v in (scale, beta, mean, var)),
             epsilon=1e-3)
    k = scale / np.sqrt(var + 1e-3)
    folded_w = (w * k[:, None, None, None]).astype(np.float32)
    folded_b = (((cb if bias else 0) - mean) * k + beta).astype(np.float32)
    return b.build([y]), folded_w, folded_b


def test_batch_norm_folds_into_the_conv():
    for bias in (False, True):
        before, w, bb = _conv_bn(bias)
        e = GraphBuilder("expected")
        x = e.input("x", (2, 3, 8, 8))
        expected = e.build([e.op("Conv", x, e.const(w), e.const(bb), pads=[1, 1, 1, 1])])
        after = rewrite(before, rules.FOLD_INTO_CONV)
        assert_graphs_equal(after, expected, rtol=1e-5)


def test_folded_conv_computes_what_conv_and_batch_norm_did():
    before, _, _ = _conv_bn(True)
    after = rewrite(before, rules.FOLD_INTO_CONV)
    xv = _rand(2, 3, 8, 8)
    want, = CompiledGraph(before, cpu()).run({"x": xv})
    got, = CompiledGraph(after, cpu()).run({"x": xv})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_per_channel_mul_and_add_fold_but_other_shapes_do_not():
    w = _rand(4, 3, 1, 1)
    b = GraphBuilder("before")
    x = b.input("x", (1, 3, 5, 5))
    y = b.op("Conv", x, b.const(w))
    y = b.op("Mul", b.const(np.full((4, 1, 1), 2.0, np.float32)), y)
    y = b.op("Add", y, b.const(np.full((1, 4, 1, 1), 0.5, np.float32)))
    y = b.op("Add", y, b.const(np.ones((5,), np.float32)))  # broadcasts along W: not folded
    before = b.build([y])

    e = GraphBuilder("expected")
    x = e.input("x", (1, 3, 5, 5))
    y = e.op("Conv", x, e.const(w * 2), e.const(np.full(4, 0.5, np.float32)))
    expected = e.build([e.op("Add", y, e.const(np.ones((5,), np.float32)))])
    assert_graphs_equal(rewrite(before, rules.FOLD_INTO_CONV), expected)


def test_training_batch_norm_is_not_folded():
    before, _, _ = _conv_bn(False)
    node = before.nodes[-1]
    training = before.replace(nodes=before.nodes[:-1] + (
        node.replace(attrs={**node.attrs, "training_mode": 1}),))
    assert rewrite(training, rules.FOLD_INTO_CONV) is training


def test_activations_fuse_into_conv_and_gemm():
    w, fc = _rand(4, 3, 3, 3), _rand(10, 64)
    b = GraphBuilder("before")
    x = b.input("x", (1, 3, 4, 4))
    y = b.op("LeakyRelu", b.op("Conv", x, b.const(w), pads=[1, 1, 1, 1]), alpha=0.2)
    flat = b.op("Flatten", y)
    z = b.op("Sigmoid", b.op("Gemm", flat, b.const(fc), transB=1))
    before = b.build([z])

    e = GraphBuilder("expected")
    x = e.input("x", (1, 3, 4, 4))
    y = e.op("portable.FusedConv", x, e.const(w), pads=[1, 1, 1, 1], activation="LeakyRelu",
             activation_attrs=json.dumps({"alpha": 0.2}))
    z = e.op("portable.FusedGemm", e.op("Flatten", y), e.const(fc), transB=1,
             activation="Sigmoid", activation_attrs="{}")
    expected = e.build([z])
    after = rewrite(before, rules.FUSE_ACTIVATIONS)
    assert_graphs_equal(after, expected)

    xv = _rand(1, 3, 4, 4)
    want, = CompiledGraph(before, cpu()).run({"x": xv})
    got, = CompiledGraph(after, cpu()).run({"x": xv})
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_conv_output_read_twice_keeps_its_activation_separate():
    b = GraphBuilder("g")
    x = b.input("x", (1, 3, 4, 4))
    y = b.op("Conv", x, b.const(_rand(2, 3, 1, 1)))
    g = b.build([b.op("Relu", y), y])
    assert rewrite(g, rules.FUSE_ACTIVATIONS) is g


def test_remaining_convs_run_as_fused_convs():
    b = GraphBuilder("before")
    x = b.input("x", (1, 3, 4, 4))
    w = _rand(2, 3, 3, 3)
    before = b.build([b.op("Conv", x, b.const(w), strides=[2, 2])])
    e = GraphBuilder("expected")
    x = e.input("x", (1, 3, 4, 4))
    expected = e.build([e.op("portable.FusedConv", x, e.const(w), strides=[2, 2])])
    assert_graphs_equal(rewrite(before, rules.SELECT_FUSED_CONV), expected)


def _pre_activation(dtype=np.float32, training_mode=0, params_as_inputs=False):
    """DenseNet's pre-activation block: BatchNormalization, a per-channel Mul and Add (Caffe's
    Scale layer), Relu, then a Conv; ``params`` are the BatchNormalization's four."""
    rng = np.random.default_rng(1)
    scale, beta, mean = (rng.standard_normal(6).astype(dtype) for _ in range(3))
    var = (np.abs(rng.standard_normal(6)) + 0.5).astype(dtype)
    b = GraphBuilder("pre-activation")
    x = b.input("x", (2, 6, 5, 5), dtype)
    params = ([b.input(f"p{i}", (6,), dtype) for i in range(4)] if params_as_inputs
              else [b.const(v) for v in (scale, beta, mean, var)])
    y = b.op("BatchNormalization", x, *params, epsilon=1e-3, training_mode=training_mode)
    y = b.op("Mul", y, b.const(rng.standard_normal((6, 1, 1)).astype(dtype)))
    y = b.op("Relu", b.op("Add", y, b.const(rng.standard_normal((6, 1, 1)).astype(dtype))))
    y = b.op("Conv", y, b.const(rng.standard_normal((3, 6, 1, 1)).astype(dtype)))
    return b.build([y]), (scale, beta, mean, var)


def test_a_batch_norm_no_conv_absorbs_becomes_a_mul_and_an_add():
    graph, (scale, beta, mean, var) = _pre_activation()
    after = rewrite(graph, rules.BATCH_NORM_AS_AFFINE)
    assert [n.op for n in after.nodes] == ["Mul", "Add", "Mul", "Add", "Relu", "Conv"]
    mul, add = after.nodes[:2]
    k = after.initializers[mul.inputs[1]]
    shift = after.initializers[add.inputs[1]]
    assert k.shape == shift.shape == (6, 1, 1) and k.dtype == shift.dtype == np.float32
    want_k = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-3)
    np.testing.assert_allclose(k.reshape(-1), want_k, rtol=1e-6)
    np.testing.assert_allclose(shift.reshape(-1), beta - mean * want_k, rtol=1e-5, atol=1e-6)


def test_batch_norm_as_mul_and_add_computes_the_batch_norm_formula():
    """Against ONNX's formula in float64, and bit for bit against the unrewritten graph (the
    rewrite takes the BatchNormalization kernel's own float32 arithmetic)."""
    graph, (scale, beta, mean, var) = _pre_activation()
    xv = RNG.standard_normal((2, 6, 5, 5)).astype(np.float32)
    bn_only = graph.replace(nodes=graph.nodes[:1], outputs=(graph.nodes[0].outputs[0],))
    after = rewrite(bn_only, rules.BATCH_NORM_AS_AFFINE)
    got, = CompiledGraph(after, cpu()).run({"x": xv})
    want, = CompiledGraph(bn_only, cpu()).run({"x": xv})
    np.testing.assert_array_equal(got, want)
    per_c = (lambda v: v.astype(np.float64).reshape(1, -1, 1, 1))
    formula = (xv - per_c(mean)) / np.sqrt(per_c(var) + 1e-3) * per_c(scale) + per_c(beta)
    np.testing.assert_allclose(got, formula, rtol=1e-5, atol=1e-5)


def test_batch_norm_stays_in_training_or_with_parameters_known_late_or_in_half():
    for graph in (_pre_activation(training_mode=1)[0], _pre_activation(params_as_inputs=True)[0],
                  _pre_activation(dtype=np.float16)[0]):
        assert rewrite(graph, rules.BATCH_NORM_AS_AFFINE) is graph
