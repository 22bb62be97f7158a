"""FlexAttention beyond the op table: refusals name the node, the op and what does not fit;
a node with bodies is exported with them as GraphProtos (checked by onnx.reference on the
exported model) and read back, a captured outer value included."""
import re

import numpy as np
import pytest

from portable.errors import ShapeError
from tests.ops.cases_flex_attention import CASES, OP, _Body
from tests.ops.harness import Case, build, rand, run_ours, run_reference

_Q = rand(1, 2, 3, 4)
_SCORES = (1, 2, 3, 3)
# a score_mod that changes the scores' shape (sums over the keys)
_SHRINK = _Body("shrink", [("ReduceSum", ("x",), ("y",), {"keepdims": 0})], {})
# a score_mod that changes the scores' dtype
_TO_DOUBLE = _Body("to_double", [("Cast", ("x",), ("y",), {"to": 11})], {})
_IDENTITY = _Body("identity", [("Identity", ("x",), ("y",), {})], {})


@pytest.mark.parametrize("inputs, attrs, message", [
    ([rand(1, 3, 4)] * 3, {}, "must be rank 4"),
    ([_Q, rand(1, 3, 3, 4), rand(1, 3, 3, 4)], {}, "not a multiple of kv_num_heads"),
    ([_Q, _Q, rand(1, 2, 5, 4)], {}, "must share the sequence length"),
    ([_Q, _Q.astype(np.float64), _Q], {}, "K (float64) must have Q's dtype float32"),
    ([_Q, _Q, _Q], {"softmax_precision": 16}, "softmax_precision=16"),
    ([_Q, _Q, _Q], {"score_mod": _SHRINK.graph(_SCORES)}, "it must keep their shape and dtype"),
    ([_Q, _Q, _Q], {"prob_mod": _TO_DOUBLE.graph(_SCORES)}, "it must keep their shape and dtype"),
    # (a trailing input that the body does not capture)
    ([_Q, _Q, _Q, rand(*_SCORES)], {"score_mod": _IDENTITY.graph(_SCORES)},
     "score_mod captures 0 outer values, the node gives it 1"),
])
def test_refusals_say_what_does_not_fit(inputs, attrs, message):
    with pytest.raises(ShapeError, match=r"op ai\.onnx\.preview\.FlexAttention\).*"
                       + re.escape(message)):
        run_ours(Case(OP, inputs, attrs=attrs))


@pytest.mark.parametrize("case", [c for c in CASES if c.name in (
    "mha", "score_mod_soft_cap", "score_mod_and_prob_mod")], ids=lambda c: c.name)
def test_export_writes_the_bodies(case):
    pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    from exporters.onnx.exporter import export_model

    graph, feeds = build(case, case.inputs)
    model = export_model(graph)
    assert ("ai.onnx.preview", 1) in [(o.domain, o.version) for o in model.opset_import]
    got = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, run_reference(case)[0], rtol=1e-6, atol=1e-7)


def test_captured_value_survives_export_and_import():
    pytest.importorskip("onnx")
    from exporters.onnx import backend
    from exporters.onnx.exporter import export_model

    case = next(c for c in CASES if c.name == "score_mod_captured_bias")
    graph, feeds = build(case, case.inputs)
    model = export_model(graph)
    assert [list(n.input) for n in model.graph.node] == [["in0", "in1", "in2"]]
    got = backend.prepare(model).run([feeds[f"in{i}"] for i in range(4)])[0]
    np.testing.assert_allclose(got, run_reference(case)[0], rtol=1e-6, atol=1e-7)
