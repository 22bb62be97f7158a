"""``sym.contrib.foreach / while_loop / cond`` build one Scan / Loop / If node each; bound and
run, they agree with the imperative ``nd.contrib`` versions (and with closed forms in NumPy), and
a hybridized block with ``F.contrib.foreach`` is one Scan node that exports to ONNX."""
import numpy as np
import pytest

import portable as pt
from portable import autograd
from portable.gluon import nn

sym, nd = pt.sym, pt.nd
RNG = np.random.default_rng(7)


def _ops(graph):
    return [node.op for node in graph.nodes]


def _rnn_step(F, x, h, w, u):  # noqa: N803 - MXNet's F
    """One step of a tiny Elman RNN cell, written over F (sym or nd)."""
    new = F.tanh(F.dot(x, w) + F.dot(h, u))
    return new, new


def test_foreach_is_one_scan_node_and_matches_imperative():
    data = RNG.standard_normal((5, 2, 3)).astype(np.float32)
    h0 = RNG.standard_normal((2, 4)).astype(np.float32)
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    u = RNG.standard_normal((4, 4)).astype(np.float32)
    W, U = sym.var("w"), sym.var("u")
    outs, last = sym.contrib.foreach(lambda x, h: _rnn_step(sym, x, h, W, U), sym.var("data"),
                                     sym.var("h0"))
    net = sym.Group([outs, last])
    graph = net.to_graph({"data": data.shape, "h0": h0.shape, "w": w.shape, "u": u.shape})
    assert _ops(graph) == ["Scan"]
    body = graph.nodes[0].attrs["body"]
    assert len(body.captures) == 2 and "Tanh" in _ops(body)
    got = net.eval(data=nd.array(data), h0=nd.array(h0), w=nd.array(w), u=nd.array(u))
    wn, un = nd.array(w), nd.array(u)
    ref_outs, ref_last = nd.contrib.foreach(lambda x, h: _rnn_step(nd, x, h, wn, un),
                                            nd.array(data), nd.array(h0))
    np.testing.assert_allclose(got[0].asnumpy(), ref_outs.asnumpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1].asnumpy(), ref_last.asnumpy(), rtol=1e-5, atol=1e-6)
    h, rows = h0, []  # closed form in NumPy
    for x in data:
        h = np.tanh(x @ w + h @ u)
        rows.append(h)
    np.testing.assert_allclose(got[0].asnumpy(), np.stack(rows), rtol=1e-5, atol=1e-6)


def test_foreach_lists_of_data_and_states():
    a = RNG.standard_normal((4, 3)).astype(np.float32)
    b = RNG.standard_normal((4, 3)).astype(np.float32)

    def body(xs, states):
        x, y = xs
        s, t = states
        return [x * y, x + s], [s + x, t * 2.0]

    outs, states = sym.contrib.foreach(body, [sym.var("a"), sym.var("b")],
                                       [sym.var("s"), sym.var("t")])
    net = sym.Group(outs + states)
    got = [r.asnumpy() for r in net.eval(a=nd.array(a), b=nd.array(b), s=nd.zeros((3,)),
                                         t=nd.ones((3,)))]
    ref_outs, ref_states = nd.contrib.foreach(body, [nd.array(a), nd.array(b)],
                                              [nd.zeros((3,)), nd.ones((3,))])
    for g, r in zip(got, list(ref_outs) + list(ref_states)):
        np.testing.assert_allclose(g, r.asnumpy(), rtol=1e-6)
    np.testing.assert_allclose(got[2], np.cumsum(a, axis=0)[-1], rtol=1e-5)
    np.testing.assert_allclose(got[3], np.full(3, 16.0), rtol=1e-6)


def test_foreach_gradients_match_imperative_autograd():
    data = RNG.standard_normal((4, 2, 3)).astype(np.float32)
    h0 = RNG.standard_normal((2, 4)).astype(np.float32)
    w = RNG.standard_normal((3, 4)).astype(np.float32) * 0.5
    u = RNG.standard_normal((4, 4)).astype(np.float32) * 0.5
    W, U = sym.var("w"), sym.var("u")
    outs, last = sym.contrib.foreach(lambda x, h: _rnn_step(sym, x, h, W, U), sym.var("data"),
                                     sym.var("h0"))
    loss = sym.sum(outs * outs) + sym.sum(last)
    values = {"data": data, "h0": h0, "w": w, "u": u}
    args = {k: nd.array(v) for k, v in values.items()}
    grads = {k: nd.zeros(v.shape) for k, v in values.items()}
    exe = loss.bind(args=args, args_grad=grads)
    exe.forward(is_train=True)
    exe.backward()

    leaves = {k: nd.array(v) for k, v in values.items()}
    for leaf in leaves.values():
        leaf.attach_grad()
    with autograd.record():
        ref_outs, ref_last = nd.contrib.foreach(
            lambda x, h: _rnn_step(nd, x, h, leaves["w"], leaves["u"]), leaves["data"],
            leaves["h0"])
        ref = nd.sum(ref_outs * ref_outs) + nd.sum(ref_last)
    ref.backward()
    np.testing.assert_allclose(exe.outputs[0].asnumpy(), ref.asnumpy(), rtol=1e-5)
    for name in values:
        np.testing.assert_allclose(grads[name].asnumpy(), leaves[name].grad.asnumpy(),
                                   rtol=1e-4, atol=1e-5, err_msg=name)


def test_while_loop_is_one_loop_node_padded_to_max_iterations():
    i0, s0 = sym.var("i"), sym.var("s")
    out, (i, s) = sym.contrib.while_loop(lambda i, s: i < 3.0,
                                         lambda i, s: (s * 2.0, (i + 1.0, s + i)),
                                         (i0, s0), max_iterations=5)
    net = sym.Group([out, i, s])
    graph = net.to_graph({"i": (1,), "s": (1,)})
    assert _ops(graph).count("Loop") == 1
    loop = next(n for n in graph.nodes if n.op == "Loop")
    assert "Less" in _ops(loop.attrs["body"])  # cond is traced into the body
    got = [r.asnumpy() for r in net.eval(i=nd.array([0]), s=nd.array([1]))]
    ref_out, (ref_i, ref_s) = nd.contrib.while_loop(
        lambda i, s: i < 3, lambda i, s: (s * 2.0, (i + 1.0, s + i)),
        (nd.array([0]), nd.array([1])), max_iterations=5)
    np.testing.assert_allclose(got[0], ref_out.asnumpy())
    np.testing.assert_allclose(got[0].ravel(), [2.0, 2.0, 4.0, 0.0, 0.0])  # s = 1, 1, 2
    np.testing.assert_allclose(got[1], ref_i.asnumpy())
    np.testing.assert_allclose(got[2], ref_s.asnumpy())
    np.testing.assert_allclose(got[2], [4.0])


def test_while_loop_stops_at_max_iterations_and_reads_outer_values():
    step = sym.var("step")
    out, x = sym.contrib.while_loop(lambda x: sym.sum(x) < 100.0,
                                    lambda x: (x, x + step), sym.var("x"), max_iterations=3)
    net = sym.Group([out, x])
    got = [r.asnumpy() for r in net.eval(x=nd.array([1, 2]), step=nd.array([1, 1]))]
    np.testing.assert_allclose(got[0], [[1, 2], [2, 3], [3, 4]])
    np.testing.assert_allclose(got[1], [4, 5])


@pytest.mark.parametrize("flag", [1.0, 0.0])
def test_cond_is_one_if_node_and_matches_imperative(flag):
    a, b = sym.var("a"), sym.var("b")
    out = sym.contrib.cond(sym.var("p"), lambda: a * b + 1.0, lambda: a - b)
    graph = out.to_graph({"p": (1,), "a": (3,), "b": (3,)})
    assert _ops(graph).count("If") == 1
    av = RNG.standard_normal(3).astype(np.float32)
    bv = RNG.standard_normal(3).astype(np.float32)
    got = out.eval(p=nd.array([flag]), a=nd.array(av), b=nd.array(bv))[0].asnumpy()
    an, bn = nd.array(av), nd.array(bv)
    ref = nd.contrib.cond(nd.array([flag]), lambda: an * bn + 1.0, lambda: an - bn)
    np.testing.assert_allclose(got, ref.asnumpy(), rtol=1e-6)
    np.testing.assert_allclose(got, av * bv + 1.0 if flag else av - bv, rtol=1e-6)


class _TinyRNN(nn.HybridBlock):
    """A tiny RNN over the first axis of its input with F.contrib.foreach."""

    def __init__(self, units=4, inputs=3, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        with self.name_scope():
            self.w = self.params.get("w", shape=(inputs, units))
            self.u = self.params.get("u", shape=(units, units))

    def hybrid_forward(self, F, x, h0, w, u):  # noqa: N803
        return F.contrib.foreach(lambda xt, h: _rnn_step(F, xt, h, w, u), x, h0)


def test_hybridized_block_is_one_scan_node_and_exports_to_onnx(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    net = _TinyRNN()
    net.initialize(pt.init.Normal(0.5))
    x = nd.array(RNG.standard_normal((5, 2, 3)).astype(np.float32))
    h0 = nd.array(RNG.standard_normal((2, 4)).astype(np.float32))
    eager = [o.asnumpy() for o in net(x, h0)]
    net.hybridize()
    hybrid = [o.asnumpy() for o in net(x, h0)]
    for e, h in zip(eager, hybrid):
        np.testing.assert_allclose(h, e, rtol=1e-5, atol=1e-6)
    graph, params = net.inference_graph([x, h0])
    assert _ops(graph).count("Scan") == 1 and "Tanh" not in _ops(graph)
    path = str(tmp_path / "rnn.onnx")
    net.export_onnx(path, [x, h0])
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    arrays = {"data0": x.asnumpy(), "data1": h0.asnumpy()}
    feeds = {i.name: arrays[i.name] for i in session.get_inputs()}
    ran = session.run(None, feeds)
    for e, r in zip(eager, ran):
        np.testing.assert_allclose(r, e, rtol=1e-5, atol=1e-6)


def test_nested_foreach_and_infer_type_without_shapes():
    def row_sum(row, acc):
        doubled, total = sym.contrib.foreach(lambda x, s: (x * 2.0, s + x), row, acc)
        return doubled, total

    outs, total = sym.contrib.foreach(row_sum, sym.var("d"), sym.var("a"))
    net = sym.Group([outs, total])
    d = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = [r.asnumpy() for r in net.eval(d=nd.array(d), a=nd.zeros(()))]
    np.testing.assert_allclose(got[0], d * 2.0)
    np.testing.assert_allclose(got[1], d.sum())
    _, out_types, _ = net.infer_type(d="float64", a="float64")
    assert [t.name for t in out_types] == ["float64", "float64"]


def _onnx_run(net, feeds, tmp_path):
    """Export ``net``'s graph and run it in onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    from portable.io.exporters import get_exporter

    graph = net.to_graph({k: v.shape for k, v in feeds.items()})
    path = str(tmp_path / "model.onnx")
    get_exporter("onnx")(graph, {}, path, None)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})


def test_while_loop_and_cond_export_to_onnx(tmp_path):
    step = sym.var("step")
    out, x = sym.contrib.while_loop(lambda x: sym.sum(x) < 10.0, lambda x: (x * 3.0, x + step),
                                    sym.var("x"), max_iterations=6)
    picked = sym.contrib.cond(sym.var("p"), lambda: x * 2.0, lambda: x - step)
    net = sym.Group([out, x, picked])
    feeds = {"x": np.asarray([1.0, 2.0], np.float32), "step": np.asarray([1.0, 1.0], np.float32),
             "p": np.asarray([0.0], np.float32)}
    ours = [r.asnumpy() for r in net.eval(**{k: nd.array(v) for k, v in feeds.items()})]
    # x: [1,2] -> [2,3] -> [3,4] -> [4,5] -> [5,6] (sum 11 stops it); rows are 3*x before
    np.testing.assert_allclose(ours[0], [[3, 6], [6, 9], [9, 12], [12, 15], [0, 0], [0, 0]])
    np.testing.assert_allclose(ours[1], [5, 6])
    np.testing.assert_allclose(ours[2], [4, 5])
    for theirs, mine in zip(_onnx_run(net, feeds, tmp_path), ours):
        np.testing.assert_allclose(theirs, mine, rtol=1e-6)


def test_while_loop_and_cond_gradients_match_imperative_autograd():
    w = sym.var("w")
    out, x = sym.contrib.while_loop(lambda x: sym.sum(x) < 10.0, lambda x: (x * w, x + w),
                                    sym.var("x"), max_iterations=6)
    y = sym.contrib.cond(sym.var("p"), lambda: x * w, lambda: x + 1.0)
    loss = sym.sum(out) + sym.sum(y)
    values = {"x": np.asarray([1.0, 2.0], np.float32), "w": np.asarray([1.5, 0.5], np.float32)}
    grads = {k: nd.zeros((2,)) for k in values}
    exe = loss.bind(args={**{k: nd.array(v) for k, v in values.items()}, "p": nd.array([1.0])},
                    args_grad=grads, grad_req={"x": "write", "w": "write", "p": "null"})
    exe.forward(is_train=True)
    exe.backward()
    leaves = {k: nd.array(v) for k, v in values.items()}
    for leaf in leaves.values():
        leaf.attach_grad()
    W = leaves["w"]
    with autograd.record():
        o, xx = nd.contrib.while_loop(lambda x: nd.sum(x) < 10.0, lambda x: (x * W, x + W),
                                      leaves["x"], max_iterations=6)
        yy = nd.contrib.cond(nd.array([1.0]), lambda: xx * W, lambda: xx + 1.0)
        ref = nd.sum(o) + nd.sum(yy)
    ref.backward()
    np.testing.assert_allclose(exe.outputs[0].asnumpy(), ref.asnumpy(), rtol=1e-6)
    for name in values:
        np.testing.assert_allclose(grads[name].asnumpy(), leaves[name].grad.asnumpy(),
                                   rtol=1e-5, err_msg=name)


def test_hybridized_foreach_block_gradients_match_eager():
    net = _TinyRNN()
    net.initialize(pt.init.Normal(0.5))
    x = nd.array(RNG.standard_normal((5, 2, 3)).astype(np.float32))
    h0 = nd.array(RNG.standard_normal((2, 4)).astype(np.float32))

    def grads():
        with autograd.record():
            outs, last = net(x, h0)
            loss = nd.sum(outs * outs) + nd.sum(last)
        loss.backward()
        return [p.grad().asnumpy().copy() for p in net.collect_params().values()]

    eager = grads()
    net.hybridize()
    for e, h in zip(eager, grads()):
        np.testing.assert_allclose(h, e, rtol=1e-5, atol=1e-6)
