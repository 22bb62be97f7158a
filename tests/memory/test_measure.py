"""Predicted memory against measured memory (tracemalloc), and the report's figures."""
import numpy as np

from portable.ir import GraphBuilder
from portable.memory import (builtin_prediction_graph, measure, memory_report,
                             prediction_profile, random_feeds)

MB = 1 << 20


def test_report_of_a_chain_counts_values_by_hand():
    b = GraphBuilder("chain")
    x = b.input("x", (64, 64))
    w = b.const(np.eye(64, dtype=np.float32))
    h = b.op("Relu", b.op("MatMul", x, w))
    y = b.op("Neg", b.op("MatMul", h, w))
    report = memory_report(b.build([y]))
    block = 64 * 64 * 4
    assert report.naive_bytes == 4 * block
    assert report.inplace_bytes == 2 * block
    assert report.both_bytes == report.planned_bytes == report.lower_bound_bytes == 2 * block
    assert report.weights_bytes == block and report.inputs_bytes == block
    assert report.categories["activations"] == 2 * block
    data = report.to_json()
    for key in ("naive_bytes", "inplace_bytes", "coshare_bytes", "planned_bytes",
                "lower_bound_bytes", "weights_bytes"):
        assert isinstance(data[key], int)


def test_measured_peak_follows_the_plan_for_a_convnet():
    graph = builtin_prediction_graph("lenet", batch=64)
    report = prediction_profile(graph, model="lenet", level="all")
    assert report.workspace_bytes > 0  # FusedConv declares its im2col temporaries
    ratio = report.measured_peak_bytes / report.predicted_peak_bytes
    assert 0.9 < ratio < 1.10, report.to_json()
    # the arena really is allocated: the resident memory before the run holds it
    resident = report.measured["resident_before_run_bytes"]
    assert resident >= report.planned_bytes + report.weights_bytes


def test_the_naive_strategy_measures_more():
    graph = builtin_prediction_graph("lenet", batch=64)
    naive = prediction_profile(graph, level="none", strategy="naive")
    both = prediction_profile(graph, level="none", strategy="both")
    assert naive.measured_peak_bytes - both.measured_peak_bytes > 0.5 * (
        naive.planned_bytes - both.planned_bytes)


def test_measure_runs_the_graph_and_reports_time():
    b = GraphBuilder("g")
    x = b.input("x", (256, 256))
    g = b.build([b.op("Tanh", b.op("Exp", x))])
    result = measure(g, random_feeds(g))
    assert result["seconds"] > 0
    assert result["measured_peak_bytes"] >= 2 * 256 * 256 * 4  # input and one buffer
