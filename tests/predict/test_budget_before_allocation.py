"""The Predictor's memory budget is checked before the memory it guards is allocated: declared
inputs before the graph is optimised, constant folding never computes a value over the budget
(a tiny model whose constant subgraph would compute hundreds of MiB folds nothing), and
constants (a ConstantOfShape weight, one element seen through zero strides) are copied dense
only after the plan, the weights and the inputs are known to fit.

Models are built with the ``onnx`` package's helper; sizes are compared with closed forms
(rows * cols * 4 bytes), and the memory a refusal costs is measured: ``tracemalloc`` in process
(numpy reports its allocations to it), an address-space limit for a subprocess.
"""
from __future__ import annotations

import os
import sys
import tracemalloc

import numpy as np
import pytest

from portable.device import cpu
from portable.errors import MemoryBudgetError
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder
from portable.passes.fold_constants import (DEFAULT_LIMIT, PASS_NAME, bounded_pipeline,
                                            fold_constants, within_bytes)
from portable.passes.pack_weights import PASS_NAME as PACK_PASS_NAME
from portable.passes.pipeline import PIPELINE
from portable.predict import Predictor
from portable.predict.formats import load_graph

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

MiB = 1 << 20


def _save(path, nodes, inputs, initializers=()) -> str:
    """An opset-18 model with float output ``y``; ``inputs`` are ``(name, shape)``."""
    graph = helper.make_graph(
        nodes, "budget", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                          for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, n) for n, v in initializers])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return str(path)


def _fill(side: int, value: float = 1.0):
    """ConstantOfShape([side, side], value) -> "c": a side x side float32 constant."""
    node = helper.make_node("ConstantOfShape", ["shape"], ["c"],
                            value=numpy_helper.from_array(np.array([value], np.float32)))
    return node, ("shape", np.array([side, side], np.int64))


def folding_model(path, side: int) -> str:
    """y = x + sum(c + c), c = ConstantOfShape([side, side]): everything but the last Add is
    constant, and folding it whole computes a side x side float32 array."""
    fill, shape = _fill(side)
    return _save(path, [fill, helper.make_node("Add", ["c", "c"], ["d"]),
                        helper.make_node("ReduceSum", ["d"], ["s"], keepdims=0),
                        helper.make_node("Add", ["x", "s"], ["y"])], [("x", [1])], [shape])


def filled_weight_model(path, side: int) -> str:
    """y = x @ c, c = ConstantOfShape([side, side]): a weight that costs nothing until a kernel
    reads it dense."""
    fill, shape = _fill(side)
    return _save(path, [fill, helper.make_node("MatMul", ["x", "c"], ["y"])], [("x", [1, side])],
                 [shape])


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


def _refused(fn, *words) -> int:
    def call():
        with pytest.raises(MemoryBudgetError) as info:
            fn()
        for word in words:
            assert word in str(info.value), str(info.value)
    return _peak(call)


def test_a_tiny_model_folding_to_a_huge_constant_is_refused_without_computing_it(tmp_path):
    side = 4096  # c + c is 64 MiB of float32; the budget 1 MiB
    path = folding_model(tmp_path / "fold.onnx", side)
    assert os.path.getsize(path) < 300
    peak = _refused(lambda: Predictor(path, memory_budget="1MB"), "fold.onnx",
                    "more than the memory budget 1.0 MiB", "plan 64.0 MiB")
    assert peak < 4 * MiB, peak  # before: the 64 MiB fold, then its copy


def test_a_constant_filled_weight_is_refused_before_it_is_copied_dense(tmp_path):
    side = 4096
    path = filled_weight_model(tmp_path / "fill.onnx", side)
    peak = _refused(lambda: Predictor(path, memory_budget="1MB"), "fill.onnx",
                    f"weights {side * side * 4 // MiB}.0 MiB")
    assert peak < 4 * MiB, peak


@pytest.mark.parametrize("optimize", ["none", "all"])
def test_the_compiled_graph_checks_before_copying_constants(tmp_path, optimize):
    graph = load_graph(filled_weight_model(tmp_path / "fill.onnx", 4096))
    peak = _refused(lambda: CompiledGraph(graph, cpu(), optimize=optimize, memory_budget=MiB),
                    "weights 64.0 MiB")
    assert peak < 4 * MiB, peak


def test_declared_inputs_over_the_budget_are_refused_before_optimising(tmp_path):
    path = _save(tmp_path / "wide.onnx", [helper.make_node("Relu", ["x"], ["y"])],
                 [("x", [1 << 19, 1 << 20])])
    nbytes = (1 << 39) * 4  # 2 TiB
    peak = _refused(lambda: Predictor(path, batch_size=1 << 19, memory_budget="16MB"),
                    "wide.onnx", "'x'", f"{nbytes / (1 << 40):.1f} TiB",
                    "more than the memory budget 16.0 MiB")
    assert peak < 4 * MiB


def test_within_the_budget_constants_still_fold_and_the_figures_add_up(tmp_path):
    nodes = [helper.make_node("ConstantOfShape", ["wshape"], ["w"],
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Mul", ["w", "four"], ["w4"]),
             helper.make_node("MatMul", ["x", "w4"], ["y"])]
    path = _save(tmp_path / "small.onnx", nodes, [("x", [2, 4])],
                 [("wshape", np.array([4, 3], np.int64)), ("four", np.array(4.0, np.float32))])
    predictor = Predictor(path, batch_size=2, memory_budget="1MB")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    (y,) = predictor.predict(x)
    np.testing.assert_allclose(y, x @ np.full((4, 3), 2.0, np.float32), rtol=1e-6)
    memory = predictor.memory
    assert memory["weights_bytes"] == 4 * 3 * 4  # the folded weight only
    assert memory["io_bytes"] == 2 * 4 * 4
    assert memory["total_bytes"] == (memory["plan_bytes"] + memory["weights_bytes"]
                                     + memory["io_bytes"]) <= MiB


# -- the folding limit itself ----------------------------------------------------------------------


def _added_constant(side: int):
    b = GraphBuilder("g")
    x = b.input("x", (side, side))
    c = b.op("ConstantOfShape", b.const(np.array([side, side], np.int64)),
             value=np.array([1.0], np.float32))
    return b.build([b.op("Add", x, b.op("Add", c, c))])


def test_a_fold_over_the_limit_is_left_to_run_and_one_under_it_folds():
    big = _added_constant(1024)  # c + c: 1 Mi elements, 4 MiB
    left = fold_constants(big, within_bytes(MiB))
    assert [n.op for n in left.nodes] == ["Add", "Add"]  # ConstantOfShape's view folds free
    folded = fold_constants(big, within_bytes(16 * MiB))
    assert [n.op for n in folded.nodes] == ["Add"]
    (value,) = [v for v in folded.initializers.values() if v.shape == (1024, 1024)]
    np.testing.assert_array_equal(value, np.full((1024, 1024), 2.0, np.float32))


def test_element_limits_for_byte_budgets():
    assert within_bytes(MiB) == MiB // 8  # any dtype up to 8 bytes stays within the bytes
    assert within_bytes(1 << 60) == DEFAULT_LIMIT and within_bytes(0) == 0


def test_a_bounded_pipeline_changes_only_its_folding_and_packing_passes():
    bounded = bounded_pipeline(PIPELINE, MiB)
    assert [p.name for p in bounded] == [p.name for p in PIPELINE]
    changed = [p.name for p, q in zip(bounded, PIPELINE) if p.run is not q.run]
    # (both ask the device which weight dtypes it holds)
    assert changed == [PACK_PASS_NAME, PASS_NAME]
    assert [n.op for n in dict((p.name, p) for p in bounded)[PASS_NAME].run(
        _added_constant(1024), ()).nodes] == ["Add", "Add"]


# -- the same refusal under an address-space limit -------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux")
def test_predict_refuses_the_folding_model_within_a_tight_address_space(tmp_path):
    """Folding c + c for side 16384 would take 1 GiB; the command runs with its baseline
    address space (measured on the same model at side 64) plus 256 MiB, and must exit with our
    budget error, not a MemoryError or an out-of-memory report."""
    from tests.cli.test_allocation_limits import HEADROOM, run_limited, vm_peak

    small = folding_model(tmp_path / "small.onnx", 64)
    big = folding_model(tmp_path / "big.onnx", 16384)
    assert os.path.getsize(big) < 300
    np.save(tmp_path / "x.npy", np.ones(1, np.float32))
    args = ["predict", "--inputs", str(tmp_path / "x.npy"), "--memory-budget", "1MB"]
    baseline = run_limited([*args, small])
    assert baseline.returncode == 0, baseline.stderr[-2000:]
    proc = run_limited([*args, big], limit=vm_peak(baseline) + HEADROOM)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "big.onnx" in proc.stderr and "more than the memory budget 1.0 MiB" in proc.stderr
    assert "Traceback" not in proc.stderr and "out of memory" not in proc.stderr
