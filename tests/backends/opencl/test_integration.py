"""The OpenCL backend under the engine's front ends: NDArray and autograd, copies between
devices, the Symbol executor, compiled (memory-planned, optimised) graphs and hybridized Gluon
blocks give what the CPU gives."""
import numpy as np
import pytest

import portable as pt
from portable import autograd
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder


def test_ndarray_ops_and_autograd_match_the_cpu(device):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    results = {}
    for dev in (pt.cpu(), device):
        x = pt.nd.array(a, device=dev)
        w = pt.nd.array(b, device=dev)
        x.attach_grad()
        w.attach_grad()
        with autograd.record():
            y = pt.nd.tanh(pt.nd.dot(x, w) * 2 + 1).sum()
        y.backward()
        results[str(dev)] = (y.asnumpy(), x.grad.asnumpy(), w.grad.asnumpy())
        assert y.device == dev and x.grad.device == dev
    for got, want in zip(results[str(device)], results["cpu(0)"]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_copies_between_devices_are_ordered_by_the_engine(device):
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = pt.nd.array(host, device=device)
    y = (x + 1).copyto(pt.cpu())  # reads the pending result, writes a CPU array
    z = y.as_in_context(device) * 2
    x[:] = 0  # a later write must not reach the copies already made
    np.testing.assert_array_equal(z.asnumpy(), (host + 1) * 2)
    np.testing.assert_array_equal(y.asnumpy(), host + 1)
    np.testing.assert_array_equal(x.asnumpy(), np.zeros_like(host))
    pt.nd.waitall()


def test_engine_op_completes_only_after_its_kernels(device):
    """wait_to_read returns only when the device has finished: the result is complete even
    when read by a raw device copy that does not queue behind the kernel."""
    import pyopencl as cl

    x = pt.nd.ones((256, 256), device=device)
    y = pt.nd.dot(x, x)
    y.wait_to_read()
    runtime = device.backend.runtime
    host = np.empty((256, 256), np.float32)
    other = cl.CommandQueue(runtime.device.context, runtime.device.device)  # not in order
    cl.enqueue_copy(other, host, y._data.buffer, src_offset=y._data.offset * 4,
                    is_blocking=True)
    assert (host == 256).all()


def _mlp_symbol():
    data = pt.sym.var("data")
    h = pt.sym.FullyConnected(data, num_hidden=8, name="fc1")
    h = pt.sym.Activation(h, act_type="relu", name="relu1")
    return pt.sym.FullyConnected(h, num_hidden=3, name="fc2")


def test_symbol_executor_trains_like_the_cpu(device):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 5)).astype(np.float32)
    labels = rng.integers(0, 3, 16).astype(np.int64)
    loss = pt.sym.SoftmaxCrossEntropy(_mlp_symbol(), pt.sym.var("label", dtype="int64"))
    weights = {}
    for dev in (pt.cpu(), device):
        exe = loss.simple_bind(dev, data=(16, 5), label=(16,))
        init = np.random.default_rng(1)
        for name, array in exe.arg_dict.items():
            if name not in ("data", "label"):
                array[:] = init.standard_normal(array.shape).astype(np.float32) * 0.3
        for _ in range(3):
            exe.forward(is_train=True, data=x, label=labels)
            exe.backward()
            for name in exe.grad_dict:
                if name not in ("data", "label"):
                    exe.arg_dict[name][:] = exe.arg_dict[name] - 0.1 * exe.grad_dict[name]
        weights[str(dev)] = {n: a.asnumpy() for n, a in exe.arg_dict.items()}
    for name, value in weights["cpu(0)"].items():
        np.testing.assert_allclose(weights[str(device)][name], value, rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def _convnet_graph():
    rng = np.random.default_rng(2)
    b = GraphBuilder("convnet")
    x = b.input("x", (2, 3, 10, 10))
    h = b.op("Conv", x, b.const(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3),
             b.const(rng.standard_normal(4).astype(np.float32)), pads=[1, 1, 1, 1])
    h = b.op("BatchNormalization", h, *(b.const(v.astype(np.float32)) for v in (
        rng.uniform(0.5, 1.5, 4), rng.standard_normal(4), rng.standard_normal(4) * 0.1,
        rng.uniform(0.5, 1.5, 4))))
    h = b.op("Relu", b.op("Add", h, b.const(np.float32(0.5))))
    h = b.op("MaxPool", h, kernel_shape=[2, 2], strides=[2, 2])
    h = b.op("Flatten", h)
    y = b.op("Gemm", h, b.const(rng.standard_normal((100, 5)).astype(np.float32) * 0.1),
             b.const(np.zeros(5, np.float32)))
    return b.build([b.op("Sigmoid", b.op("Mul", y, b.const(np.float32(2.0))))])


@pytest.mark.parametrize("level", ["none", "all"])
def test_compiled_graph_with_fusion_matches_the_cpu(device, level):
    graph = _convnet_graph()
    x = np.random.default_rng(3).standard_normal((2, 3, 10, 10)).astype(np.float32)
    want, = CompiledGraph(graph, pt.cpu(), optimize=level).run({"x": x})
    plan = CompiledGraph(graph, device, optimize=level)
    got, = plan.run({"x": device.backend.from_numpy(x)})
    np.testing.assert_allclose(device.backend.to_numpy(got), want, rtol=1e-4, atol=1e-5)
    if level == "all":  # Conv+BN+Add+Relu became FusedConv, Mul+Sigmoid one fused kernel
        ops = [s.node.op for s in plan.steps]
        assert "portable.FusedConv" in ops and "portable.FusedElementwise" in ops


def test_planned_arena_is_the_numpy_plan_plus_alignment_padding(device):
    """The plan's storages are views of one OpenCL buffer; planned with the device's
    base-address alignment, the arena is the NumPy plan's bytes plus alignment padding."""
    from portable.passes.plan_memory import ALIGNMENT, plan_memory

    graph = _convnet_graph()
    numpy_plan = CompiledGraph(graph, pt.cpu()).plan
    compiled = CompiledGraph(graph, device)
    buffers = {id(b.buffer) for b in compiled.buffers.values()}
    assert buffers == {id(compiled.arena.buffer)}
    align = device.backend.alignment
    aligned = plan_memory(graph, compiled.info, alignment=max(align, ALIGNMENT))
    assert all(offset % align == 0 for offset in aligned.offsets.values())
    padding = aligned.arena_bytes - numpy_plan.arena_bytes
    assert 0 <= padding <= len(aligned.offsets) * max(align, ALIGNMENT)
    assert compiled.plan.arena_bytes in (numpy_plan.arena_bytes, aligned.arena_bytes)


def test_hybridized_gluon_block_matches_the_cpu(device):
    from portable.gluon import nn

    x = np.random.default_rng(4).standard_normal((4, 6)).astype(np.float32)
    outputs = {}
    for dev in (pt.cpu(), device):
        net = nn.HybridSequential()
        with net.name_scope():
            net.add(nn.Dense(5, activation="relu"), nn.Dense(2))
        pt.random.seed(0)
        net.initialize(pt.init.Xavier(), device=dev)
        net.hybridize()
        data = pt.nd.array(x, device=dev)
        with autograd.record():
            out = net(data)
        out.backward()
        grads = [p.grad(dev).asnumpy() for p in net.collect_params().values()]
        outputs[str(dev)] = (out.asnumpy(), grads)
    got, want = outputs[str(device)], outputs["cpu(0)"]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_gluon_trainer_steps_like_the_cpu(device, optimizer):
    from portable import gluon
    from portable.gluon import nn

    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 6)).astype(np.float32)
    y = rng.integers(0, 3, 8)
    params = {}
    for dev in (pt.cpu(), device):
        net = nn.HybridSequential()
        with net.name_scope():
            net.add(nn.Dense(5, activation="tanh"), nn.Dense(3))
        pt.random.seed(0)
        net.initialize(pt.init.Xavier(), device=dev)
        trainer = gluon.Trainer(net.collect_params(), optimizer,
                                {"learning_rate": 0.1, "wd": 1e-3, "clip_gradient": 1.0})
        loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        for _ in range(3):
            with autograd.record():
                loss = loss_fn(net(pt.nd.array(x, device=dev)), pt.nd.array(y, device=dev))
            loss.backward()
            trainer.step(8)
        params[str(dev)] = [p.data(dev).asnumpy() for p in net.collect_params().values()]
    for got, want in zip(params[str(device)], params["cpu(0)"]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_fused_elementwise_chains_match_the_cpu(device):
    """Chains the fusion pass makes (attributes, Clip bounds, variadic ops, Where) each run
    as one generated kernel on OpenCL."""
    b = GraphBuilder("chains")
    x, y = b.input("x", (3, 5)), b.input("y", (3, 5))
    h = b.op("Mul", b.op("LeakyRelu", b.op("Add", x, y), alpha=0.2), y)
    h = b.op("Sigmoid", b.op("Clip", h, b.const(np.float32(-0.5)), b.const(np.float32(0.4))))
    h = b.op("Relu", b.op("Sum", h, x, y))
    h = b.op("Gelu", b.op("Where", b.op("Greater", x, y), h, x), approximate="tanh")
    graph = b.build([b.op("Neg", b.op("Max", h, y))])
    rng = np.random.default_rng(6)
    feeds = {"x": rng.standard_normal((3, 5)).astype(np.float32),
             "y": rng.standard_normal((3, 5)).astype(np.float32)}
    want, = CompiledGraph(graph, pt.cpu(), optimize="all").run(feeds)
    plan = CompiledGraph(graph, device, optimize="all")
    assert sum(s.node.op == "portable.FusedElementwise" for s in plan.steps) >= 2
    got, = plan.run({k: device.backend.from_numpy(v) for k, v in feeds.items()})
    np.testing.assert_allclose(device.backend.to_numpy(got), want, rtol=1e-5, atol=1e-6)
