"""The op table: forward against onnx.reference, gradients against finite differences (float64).

Every family's cases live in ``tests/ops/cases_<family>.py``; a test fails when a declared op has
no forward case, or a differentiable op has no gradient case.
"""
from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest

import tests.ops as cases_package
from portable.ops import registry
from tests.ops.harness import (assert_output_matches, diff_inputs, numeric_gradients, run_ours,
                               run_reference, symbolic_gradients, to64)

CASES = []
for _info in pkgutil.iter_modules(cases_package.__path__):
    if _info.name.startswith("cases_"):
        CASES.extend(importlib.import_module(f"tests.ops.{_info.name}").CASES)
GRAD_CASES = [c for c in CASES if c.grad and registry.get(c.op).differentiable]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_forward_matches_reference(case):
    if case.reference is None:
        pytest.importorskip("onnx", reason="onnx provides the reference evaluator")
    expected = run_reference(case)
    ours = run_ours(case)
    assert len(ours) >= len(expected[:case.outputs])
    for j, (got, want) in enumerate(zip(ours, expected[:case.outputs])):
        assert_output_matches(got, want, case, j)


@pytest.mark.parametrize("case", GRAD_CASES, ids=[c.id for c in GRAD_CASES])
def test_gradient_matches_finite_differences(case):
    case = to64(case)
    outs = run_ours(case)
    rng = np.random.default_rng(1)
    heads = [rng.uniform(0.5, 1.5, size=o.shape).astype(o.dtype) if o.dtype.kind == "f"
             else np.zeros(o.shape, o.dtype) for o in outs]
    wrt, ours = symbolic_gradients(case, heads)
    assert wrt, f"{case.id}: no differentiable input to check"
    expected = (numeric_gradients(case, heads, wrt) if case.grad_reference is None
                else case.grad_reference(case.inputs, case.attrs, heads))
    for i, got, want in zip(wrt, ours, expected):
        np.testing.assert_allclose(got, want, rtol=case.grad_tol, atol=case.grad_tol,
                                   err_msg=f"gradient of input {i} of {case.id}")


def test_every_op_is_in_the_table():
    forward = {c.op for c in CASES}
    missing = sorted(set(registry.ops) - forward)
    assert not missing, f"ops without a forward case in tests/ops/cases_*.py: {missing}"
    graded = {c.op for c in GRAD_CASES if diff_inputs(c)}
    missing = sorted(name for name, op in registry.ops.items()
                     if op.differentiable and name not in graded)
    assert not missing, f"differentiable ops without a gradient case: {missing}"
