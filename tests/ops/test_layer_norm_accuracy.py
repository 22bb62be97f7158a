"""LayerNormalization of rows far from zero against their spread (values near 1,000 or 10,000
that vary by 1) against float64: the first float32 mean is off by up to half a unit in the
last place of the values, and that error, divided by the spread, used to reach every output
(2e-4 on the CPU, 4e-4 on OpenCL, so the two devices disagreed beyond 1e-4). Every kernel
takes the centred values' own mean off them, so each path stays within 1e-5 of float64."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from backends.numpy import jit, kernel_table
from tests.ops.harness import Case, rand, run_ours


def _case(offset: float, axis: int = -1) -> Case:
    x = rand(6, 4, 16, low=offset, high=offset + 1)
    width = x.shape[axis:] if axis != -1 else x.shape[-1:]
    return Case("LayerNormalization", [x, rand(*width, seed=1), rand(*width, seed=2)],
                attrs={"axis": axis}, outputs=3, grad=False, name=f"offset_{offset:g}")


def _float64(case: Case):
    x, scale, bias = (np.asarray(v, np.float64) for v in case.inputs)
    axes = tuple(range(case.attrs["axis"] % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    inv_std = 1 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + 1e-5)
    return (x - mean) * inv_std * scale + bias, mean, inv_std


def _check(got, case):
    y, mean, inv_std = _float64(case)
    np.testing.assert_allclose(got[0], y, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got[1].reshape(mean.shape), mean, rtol=1e-7, atol=0)
    np.testing.assert_allclose(got[2].reshape(inv_std.shape), inv_std, rtol=1e-5, atol=0)


@pytest.mark.parametrize("offset", [1000.0, 10000.0])
@pytest.mark.parametrize("axis", [-1, 1])  # (one axis: the row kernels; two: the general one)
@pytest.mark.parametrize("tier", ["compiled", "numpy"])
def test_cpu_layer_norm_of_offset_rows_matches_float64(offset, axis, tier, monkeypatch):
    if tier == "compiled" and not jit.available():
        pytest.skip("numba is not installed (pip install 'portable[jit]')")
    monkeypatch.setattr(pt.cpu().backend, "kernels", kernel_table(compiled=tier == "compiled"))
    case = _case(offset, axis)
    _check(run_ours(case), case)


@pytest.mark.parametrize("offset", [1000.0, 10000.0])
def test_opencl_layer_norm_of_offset_rows_matches_float64(offset):
    from tests.backends.opencl.conftest import opencl_device

    case = _case(offset)
    _check(run_ours(case, device=opencl_device()), case)
