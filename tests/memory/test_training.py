"""One SGD training step as a graph: closed-form check, in-place updates, mirroring."""
import numpy as np

from portable import symbol as sym
from portable.device import cpu
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder
from portable.memory import memory_report, random_feeds, training_graph
from portable.passes.plan_memory import plan_memory


def _softmax_regression(n, d, k):
    b = GraphBuilder("softmax-regression")
    x = b.input("x", (n, d), "float64")
    w = b.input("w", (k, d), "float64")
    label = b.input("label", (n,), "int64")
    logits = b.op("Gemm", x, w, transB=1)
    loss = b.op("SoftmaxCrossEntropyLoss", logits, label, reduction="mean")
    return b.build([loss])


def test_a_step_matches_the_closed_form_and_updates_in_place():
    rng = np.random.default_rng(0)
    n, d, k = 6, 5, 3
    x = rng.standard_normal((n, d)).astype(np.float64)
    w0 = rng.standard_normal((k, d)) * 0.1
    m0 = rng.standard_normal((k, d)) * 0.01
    label = rng.integers(0, k, n)
    graph = _softmax_regression(n, d, k)
    step = training_graph(graph, ["w"], learning_rate=0.5, momentum=0.9)
    compiled = CompiledGraph(step.graph, cpu(), state_updates=step.state_updates)
    w, m = w0.copy(), m0.copy()
    feeds = {"x": x, "w": w, "label": label, "w_momentum": m}
    feeds.update({name: np.ones(t.shape, t.dtype) for name, t in step.graph.inputs
                  if name not in feeds})
    compiled.run(feeds)
    # closed form: d(mean CE)/dW = (softmax(x W^T) - onehot)^T x / n
    z = x @ w0.T
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    grad = (p - np.eye(k)[label]).T @ x / n
    m_expected = 0.9 * m0 + grad
    np.testing.assert_allclose(m, m_expected, rtol=1e-10)  # written into the fed arrays
    np.testing.assert_allclose(w, w0 - 0.5 * m_expected, rtol=1e-10)
    plan = compiled.plan
    assert plan.aliases[step.state_updates["w"]] == "w"
    assert plan.aliases[step.state_updates["w_momentum"]] == "w_momentum"


def _convnet(batch=4):
    x = sym.var("data")
    for i, filters in enumerate((4, 8, 8)):
        x = sym.Convolution(x, kernel=(3, 3), num_filter=filters, pad=(1, 1), name=f"c{i}")
        x = sym.BatchNorm(x, name=f"bn{i}")
        x = sym.Activation(x, act_type="relu", name=f"r{i}")
    x = sym.FullyConnected(x, num_hidden=5, name="fc")
    loss = sym.SoftmaxCrossEntropy(x, sym.var("label", dtype="int64"), name="loss")
    graph = loss.to_graph({"data": (batch, 2, 6, 6), "label": (batch,)}, {"label": np.int64})
    aux = set(loss.list_auxiliary_states())
    params = [n for n in loss.list_arguments() if n not in ("data", "label") and n not in aux]
    return graph, params


def test_mirroring_recomputes_the_same_step_with_less_memory():
    graph, params = _convnet()
    plain = training_graph(graph, params)
    mirrored = training_graph(graph, params, use_mirror=True, mirror_segments=3)
    assert mirrored.mirror.recomputed_nodes > 0
    results = []
    for step in (plain, mirrored):
        feeds = random_feeds(step.graph, seed=3)
        CompiledGraph(step.graph, cpu(), state_updates=step.state_updates).run(feeds)
        results.append({p: feeds[p] for p in params})
    for p in params:
        np.testing.assert_allclose(results[1][p], results[0][p], rtol=1e-5, atol=1e-7)
    before = plan_memory(plain.graph, state_updates=plain.state_updates)
    after = plan_memory(mirrored.graph, state_updates=mirrored.state_updates)
    assert after.lower_bound_bytes < before.lower_bound_bytes


def test_training_report_categories_and_ratio():
    graph, params = _convnet(batch=16)
    step = training_graph(graph, params)
    report = memory_report(step.graph, categories=step.categories,
                           state_updates=step.state_updates, train=True)
    assert report.categories["weights"] > 0 and report.categories["optimizer_state"] > 0
    assert report.categories["activations"] > 0
    assert report.planned_bytes <= 1.05 * report.lower_bound_bytes
    assert report.naive_bytes >= 2 * report.planned_bytes
