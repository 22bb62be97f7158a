"""Dtype inference without shapes (``Symbol.infer_type`` before shapes are known).

The soundness check: for every case of the op table (``tests/ops/cases_*.py``), the op's dtype
rule, given only the inputs' dtypes, must give the output dtypes that its full type rule gives
from the case's concrete shapes and values; also with the case's float inputs in float64 and
float16, wherever the full rule accepts those. Ops whose output dtype depends on something a
dtype rule cannot see must refuse with a BindError naming the op (listed in REFUSED, with why).
"""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from portable.errors import BindError, PortableError
from portable.ops import registry
from portable.passes.infer import infer_types
from tests.ops.harness import Case, build
from tests.ops.test_op_table import CASES

# op -> why its output dtype cannot be known from its inputs' dtypes and attributes. None so
# far: every op's output dtype follows from its inputs' dtypes and its attributes (ONNX's type
# constraints), and a custom op's from its prop's infer_type. An op that joins this list must
# refuse in its dtype rule with ctx.fail(...) rather than guess.
REFUSED: dict[str, str] = {}


def _cast_floats(case: Case, dtype) -> Case:
    def cast(value):
        if value is None:
            return None
        if isinstance(value, list):  # a sequence: its elements
            return [cast(v) for v in value]
        value = np.asarray(value)
        return value.astype(dtype) if value.dtype.kind == "f" else value
    return Case(**{**case.__dict__, "inputs": [cast(v) for v in case.inputs]})


def _full_rule(case: Case) -> list[np.dtype]:
    graph, _ = build(case, case.inputs)
    info = infer_types(graph)
    return [info.types[name].dtype for name in graph.outputs]


def _dtype_rule(case: Case) -> list[np.dtype | None]:
    graph, _ = build(case, case.inputs)
    node = graph.nodes[0]
    # (a sequence's dtype is its elements')
    dtypes = [None if v is None else np.asarray(v[0] if isinstance(v, list) else v).dtype
              for v in case.inputs]
    op = registry.get(node.op)
    ctx = registry.DtypeContext(node, op, dtypes, [None] * len(node.outputs))
    return registry.infer_dtypes(op, ctx)[:case.outputs]


def _variants(case: Case):
    yield "as given", case
    for dtype in (np.float64, np.float16):
        variant = _cast_floats(case, dtype)
        try:
            _full_rule(variant)
        except PortableError:  # the full rule refuses this dtype: nothing to compare
            continue
        yield np.dtype(dtype).name, variant


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_dtype_rule_agrees_with_the_type_rule(case):
    if case.op in REFUSED:
        with pytest.raises(BindError, match=case.op):
            _dtype_rule(case)
        return
    for label, variant in _variants(case):
        assert _dtype_rule(variant) == _full_rule(variant), f"{case.id} ({label})"


def test_refused_ops_are_in_the_table():
    assert set(REFUSED) <= set(registry.ops)


# -- Symbol.infer_type without shapes (MXNet's answers for the layers are in
#    tests/mxnet_fidelity/cases_symbol.py, set sym_infer_type) ------------------------------

def _names(found):
    return [[None if t is None else np.dtype(t).name for t in part] for part in found]


def test_dtypes_flow_backward_through_earlier_nodes():
    x = pt.sym.var("x")
    fc = pt.sym.FullyConnected(pt.sym.relu(x), num_hidden=3, name="fc")
    assert _names(fc.infer_type(fc_bias="float16")) == [["float16"] * 3, ["float16"], []]


def test_a_conflict_names_the_node_and_both_dtypes():
    fc = pt.sym.FullyConnected(pt.sym.var("x"), num_hidden=3, name="fc")
    with pytest.raises(BindError, match=r"'fc' \(op Gemm\).*float16.*float32"):
        fc.infer_type(x="float16", fc_weight="float32")


def test_unknown_dtypes_give_none_as_mxnet_does():
    s = pt.sym.var("a") + pt.sym.var("b")
    assert s.infer_type() == (None, None, None)
    assert _names(s.infer_type_partial()) == [[None, None], [None], []]
    assert _names(pt.sym.var("z", dtype="float64").infer_type()) == [["float64"], ["float64"], []]


def test_fixed_output_dtypes_do_not_flow_back_into_the_data():
    s = pt.sym.Cast(pt.sym.var("x"), dtype="int32")
    assert s.infer_type() == (None, None, None)
    assert _names(s.infer_type(x="float16")) == [["float16"], ["int32"], []]


def test_known_shapes_still_use_the_full_type_inference():
    s = pt.sym.var("x", shape=(2, 3)) * 2.0
    assert _names(s.infer_type()) == [["float32"], ["float32"], []]


def test_a_custom_op_answers_with_its_props_infer_type():
    import portable.operator as operator

    @operator.register("dtype_inference_to_int32")
    class _ToInt32(operator.CustomOpProp):
        def infer_type(self, in_type):
            return in_type, [np.int32], []

    s = pt.sym.Custom(pt.sym.var("x"), op_type="dtype_inference_to_int32")
    assert _names(s.infer_type(x="float16")) == [["float16"], ["int32"], []]


def test_a_fused_chain_runs_its_steps_rules():
    from portable.ir.graph import Node
    from portable.ops.fused import encode_body

    body = encode_body([("Mul", [0, 1], {}), ("Relu", [-1], {})])
    node = Node("portable.FusedElementwise", ("a", "b"), ("y",), {"body": body}, "fused")
    op = registry.get(node.op)
    ctx = registry.DtypeContext(node, op, [np.dtype(np.float64), None], [None])
    assert registry.infer_dtypes(op, ctx) == [np.dtype(np.float64)]
    assert ctx.inputs[1] == np.float64  # the Mul step typed the other operand
