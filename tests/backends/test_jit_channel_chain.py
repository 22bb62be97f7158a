"""The compiled FusedElementwise for per-channel chains (backends/numpy/jit/channel_chain.py):
random chains against NumPy applying each step to the whole tensor in turn (equal bit for
bit: the loop computes each step in the tensor's dtype, in order), in place and not, with NaN
and infinities; the chains it does not take run the xp kernel; and a DenseNet-style
pre-activation block, optimised, runs through it."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import portable as pt
from backends.numpy import jit
from backends.xp.kernels import kernels as xp_kernels
from portable.backend import KernelContext, array_types
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder
from portable.ops.fused import encode_body

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (pip install 'portable[jit]')")
OP = "portable.FusedElementwise"
NUMPY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def _ctx():
    return KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)


def _compiled():
    return importlib.import_module("backends.numpy.jit.channel_chain").kernels[OP]


def _operand(rng, shape, dtype, rank):
    """A per-channel operand of one of the shapes that broadcast along the channel axis only."""
    c = shape[1]
    form = rng.integers(4)
    dims = [(c,) + (1,) * (rank - 2), (1, c) + (1,) * (rank - 2), (1,), ()][form]
    value = rng.uniform(0.5, 2.0, dims) * rng.choice([-1, 1], dims)
    value = np.asarray(value, dtype)
    if rng.integers(2):
        value.setflags(write=False)  # (a plan's constant)
    return value


def _random_chain(seed: int):
    """(body steps, inputs, NumPy's answer): a chain of 1-6 steps on a tensor of rank 3-5."""
    rng = np.random.default_rng(seed)
    dtype = [np.float32, np.float64][seed % 2]
    rank = 3 + seed % 3
    shape = tuple(int(d) for d in rng.integers(1, 6, rank))
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    flat = x.reshape(-1)
    flat[rng.integers(flat.size, size=3)] = [np.nan, np.inf, -np.inf]
    inputs, steps = [x], []
    want = x.copy()
    for index in range(int(rng.integers(1, 7))):
        chain = 0 if index == 0 else -1
        op = ["Add", "Sub", "Mul", "Div", "Relu", "Clip"][rng.integers(6)]
        if op in NUMPY:
            inputs.append(_operand(rng, shape, dtype, rank))
            refs = [chain, len(inputs) - 1]
            if rng.integers(2):
                refs.reverse()
                want = NUMPY[op](inputs[-1], want).astype(dtype)
            else:
                want = NUMPY[op](want, inputs[-1]).astype(dtype)
        elif op == "Relu":
            refs = [chain]
            want = np.maximum(want, dtype(0))
        else:
            refs = [chain]
            bounds = sorted(rng.standard_normal(2))
            for bound in bounds[:rng.integers(3)]:
                inputs.append(np.asarray([bound], dtype))
                refs.append(len(inputs) - 1)
            if len(refs) > 1:
                want = np.maximum(want, inputs[refs[1]].reshape(()))
            if len(refs) > 2:
                want = np.minimum(want, inputs[refs[2]].reshape(()))
        steps.append((op, refs, {}))
    return steps, inputs, want.astype(dtype)


@np.errstate(all="ignore")  # (a divisor a Relu made 0, inf - inf: as the kernel computes)
def _reference(seed: int):
    return _random_chain(seed)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("in_place", [False, True])
def test_random_chains_equal_numpy_step_by_step(seed, in_place):
    steps, inputs, want = _reference(seed)
    attrs = {"body": encode_body(steps)}
    kernel = _compiled()
    state = kernel.compiled_prepare(array_types(inputs), array_types(inputs[:1]), attrs)
    assert state is not None, steps
    for _ in range(2):  # (the second call reads the operand table kept from the first)
        x = inputs[0].copy()
        out = x if in_place else np.full_like(x, -7)
        assert kernel.compiled_run(state, _ctx(), [x] + inputs[1:], [out], attrs)
        np.testing.assert_array_equal(out, want)


def test_a_writeable_operand_is_read_on_every_call():
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    k = np.array([2.0, 3.0], np.float32).reshape(2, 1, 1)
    attrs = {"body": encode_body([("Mul", [0, 1], {})])}
    kernel = _compiled()
    state = kernel.compiled_prepare(array_types([x, k]), array_types([x]), attrs)
    out = np.empty_like(x)
    for factor in (2.0, 5.0):
        k[1] = factor
        assert kernel.compiled_run(state, _ctx(), [x, k], [out], attrs)
        np.testing.assert_array_equal(out, x * k)


@pytest.mark.parametrize("steps, shapes", [
    ([("Add", [0, 1], {}), ("Relu", [-1], {})], [(1, 3, 4, 4), (1, 3, 4, 4)]),  # a residual
    ([("Mul", [0, 1], {})], [(1, 3, 4, 4), (4,)]),  # along W, not the channels
    ([("Mul", [0, 1], {}), ("LeakyRelu", [-1], {"alpha": 0.1})], [(2, 3, 4), (3, 1)]),
    ([("Mul", [0, 1], {}), ("Exp", [-1], {})], [(2, 3, 4), (3, 1)]),
    ([("Mul", [0, 1], {})], [(6, 3), (3,)]),  # rank 2: planes of one element
])
def test_other_chains_run_the_xp_kernel(steps, shapes):
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    attrs = {"body": encode_body(steps)}
    out_type = array_types(inputs[:1])
    assert _compiled().compiled_prepare(array_types(inputs), out_type, attrs) is None
    got, want = np.empty_like(inputs[0]), np.empty_like(inputs[0])
    jit.kernels[OP](_ctx(), inputs, [got], attrs)
    xp_kernels[OP](_ctx(), inputs, [want], attrs)
    np.testing.assert_array_equal(got, want)


def test_an_optimised_pre_activation_block_is_one_compiled_chain():
    """BatchNormalization -> Mul -> Add -> Relu (DenseNet's caffe2 export) before a Conv:
    optimised, one FusedElementwise that the compiled loop takes, and the block's output
    against ONNX's formulas in float64."""
    rng = np.random.default_rng(5)
    c = 8
    scale, beta, mean = (rng.standard_normal(c).astype(np.float32) for _ in range(3))
    var = (np.abs(rng.standard_normal(c)) + 0.5).astype(np.float32)
    s, t = (rng.standard_normal((c, 1, 1)).astype(np.float32) for _ in range(2))
    w = rng.standard_normal((4, c, 1, 1)).astype(np.float32)
    b = GraphBuilder("block")
    x = b.input("x", (1, c, 6, 6))
    y = b.op("BatchNormalization", x, *(b.const(v) for v in (scale, beta, mean, var)),
             epsilon=1e-5)
    y = b.op("Relu", b.op("Add", b.op("Mul", y, b.const(s)), b.const(t)))
    graph = b.build([b.op("Conv", y, b.const(w))])
    plan = CompiledGraph(graph, pt.cpu(), optimize="all")
    assert [n.op for n in plan.graph.nodes] == [OP, "portable.FusedConv"]
    node = plan.graph.nodes[0]
    types = [plan.info.types[name] for name in node.inputs]
    assert _compiled().compiled_prepare(types, [plan.info.types[node.outputs[0]]],
                                        node.attrs) is not None
    xv = rng.standard_normal((1, c, 6, 6)).astype(np.float32)
    got, = plan.run({"x": xv})
    per_c = (lambda v: v.astype(np.float64).reshape(1, -1, 1, 1))
    normed = (xv - per_c(mean)) / np.sqrt(per_c(var) + 1e-5) * per_c(scale) + per_c(beta)
    act = np.maximum(normed * s + t, 0)
    want = np.einsum("mc,nchw->nmhw", w[:, :, 0, 0].astype(np.float64), act)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
