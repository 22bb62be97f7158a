"""Type inference is remembered per (immutable) graph and node: loading a model into a
Predictor infers the whole graph once per pass that changed it, not once per pass, and a node
is inferred again only when it is new or reads new types."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from portable.ir.graph import Graph, Node, TensorType
from portable.passes import infer
from portable.passes.infer import infer_types
from portable.passes.pipeline import PIPELINE
from portable.predict.formats import load_graph
from portable.predict.predictor import Predictor, _with_batch

MODELS = pathlib.Path(__file__).resolve().parents[1] / "exporters" / "data" / "torch"


def _counted(fn):
    before = dict(infer.inference_counts)
    result = fn()
    return result, {k: infer.inference_counts[k] - before[k] for k in before}


def _stages(path: pathlib.Path, batch: int) -> list[Graph]:
    """The graph as the Predictor sees it, then after each pipeline pass."""
    stages = [_with_batch(load_graph(path), batch, path.name)]
    for step in PIPELINE:
        stages.append(step.run(stages[-1], ()))
    return stages


@pytest.mark.parametrize("model", ["cnn", "mobilenet_block", "lstm"])
def test_a_predictor_infers_once_per_pass_that_changes_the_graph(model):
    path = MODELS / f"{model}.onnx"
    recorded = np.load(MODELS / f"{model}.npz")  # PyTorch's input and output
    batch = recorded["x"].shape[0]
    stages = _stages(path, batch)  # kept alive: node identities below stay unique
    changed = sum(1 for a, b in zip(stages, stages[1:])
                  if (a.nodes, a.inputs, sorted(a.initializers)) !=
                  (b.nodes, b.inputs, sorted(b.initializers)))
    seen: set[int] = set()
    distinct_nodes = 0
    for graph in stages:
        distinct_nodes += sum(1 for node in graph.nodes if id(node) not in seen)
        seen.update(id(node) for node in graph.nodes)

    _, loading = _counted(lambda: load_graph(path))  # the importer infers as it translates
    predictor, counts = _counted(lambda: Predictor(path, batch_size=batch))
    counts = {k: counts[k] - loading[k] for k in counts}
    # One analysis of the loaded graph (setting the batch), then one per pass that changed it;
    # before inference was remembered, every pass and the plan inferred again (8 for the CNN).
    assert counts["graphs"] <= 1 + changed, (counts, changed)
    # Each node object that any stage holds is inferred once (63 for the CNN before).
    assert counts["nodes"] <= distinct_nodes, (counts, distinct_nodes)
    # The plan built on remembered types computes what PyTorch computed.
    outputs = predictor.predict(recorded["x"])
    np.testing.assert_allclose(outputs[0], recorded["y"], rtol=1e-4, atol=1e-5)


def _relu_chain(length: int) -> Graph:
    nodes = tuple(Node("Relu", (f"v{i}",), (f"v{i + 1}",)) for i in range(length))
    return Graph(nodes=nodes, inputs=(("v0", TensorType((2, 3), np.float32)),),
                 outputs=(f"v{length}",))


def test_an_unchanged_graph_is_not_inferred_again_and_the_table_is_a_copy():
    graph = _relu_chain(4)
    first, counts = _counted(lambda: infer_types(graph))
    assert counts == {"graphs": 1, "nodes": 4}
    first.types["extra"] = TensorType((1,), np.float32)  # a caller extends its table
    again, counts = _counted(lambda: infer_types(graph))
    assert counts == {"graphs": 0, "nodes": 0}
    assert "extra" not in again.types and again.types["v4"] == TensorType((2, 3), np.float32)


def test_only_new_nodes_and_nodes_reading_new_types_are_inferred():
    graph = _relu_chain(4)
    infer_types(graph)
    # A pass replaces the second node: the first is recalled, the rest are inferred again
    # because the replacement is a new node (the later ones read the same types: recalled).
    nodes = list(graph.nodes)
    nodes[1] = Node("Sigmoid", ("v1",), ("v2",))
    info, counts = _counted(lambda: infer_types(graph.replace(nodes=tuple(nodes))))
    assert counts == {"graphs": 1, "nodes": 1}
    assert info.types["v4"] == TensorType((2, 3), np.float32)
    # New input types reach every node.
    wider = graph.replace(inputs=(("v0", TensorType((5, 3), np.float32)),))
    info, counts = _counted(lambda: infer_types(wider))
    assert counts == {"graphs": 1, "nodes": 4} and info.types["v4"].shape == (5, 3)
    # An override equal to the declared type is no override: remembered.
    _, counts = _counted(lambda: infer_types(graph, {"v0": TensorType((2, 3), np.float32)}))
    assert counts == {"graphs": 0, "nodes": 0}
