"""The compiled Where (backends/numpy/jit/select.py): the same values as ``np.where`` for every
layout its loops take, every dtype they compile for, NaN and infinities in either branch, and
an output that is its Y input; every other layout runs the xp kernel and still equals
``np.where``."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from backends.numpy import jit
from backends.xp.kernels import kernels as xp_kernels
from portable.backend import KernelContext, array_types, bound_kernel

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (pip install 'portable[jit]')")


def _ctx():
    return KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)


def _where(condition, x, y, out=None):
    """The cpu backend's Where, prepared for these arrays and run: (output, whether the
    compiled loop took it)."""
    from backends.numpy.jit import select

    out = np.full(condition.shape if out is None else out.shape, 7, x.dtype) \
        if out is None else out
    table = pt.cpu().backend.kernel("Where")
    assert table is jit.kernels["Where"]
    inputs = [condition, x, y]
    bound = bound_kernel(table, pt.cpu().backend, array_types(inputs), array_types([out]), {})
    bound(_ctx(), inputs, [out], {})
    loop = select.kernels["Where"].compiled_prepare(array_types(inputs), array_types([out]),
                                                    {})
    return out, loop is not None


def _values(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    values = rng.standard_normal(shape).astype(dtype)
    flat = values.reshape(-1)
    flat[::7] = np.nan
    flat[1::11] = np.inf
    flat[2::13] = -np.inf
    return values


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "bool"])
@pytest.mark.parametrize("form", ["both", "else one", "then one"])
def test_compiled_where_equals_numpy_where(dtype, form):
    rng = np.random.default_rng(0)
    shape = (4, 3, 5, 7)
    condition = rng.random(shape) < 0.5
    x = _values(rng, (1,) if form == "then one" else shape, np.dtype(dtype))
    y = _values(rng, () if form == "else one" else shape, np.dtype(dtype))
    got, compiled = _where(condition, x, y)
    assert compiled
    np.testing.assert_array_equal(got, np.where(condition, x, y))


def test_an_output_that_is_its_y_input_is_filled_elementwise():
    rng = np.random.default_rng(1)
    condition = rng.random((64, 20)) < 0.5
    x = rng.standard_normal((64, 20)).astype(np.float32)
    y = rng.standard_normal((64, 20)).astype(np.float32)
    want = np.where(condition, x, y)
    got, compiled = _where(condition, x, y, out=y)
    assert compiled and got is y
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("case", ["broadcast row", "strided x", "float16", "condition one"])
def test_other_layouts_run_the_xp_kernel_with_the_same_values(case):
    rng = np.random.default_rng(2)
    shape = (6, 8)
    condition = rng.random(shape) < 0.5
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.standard_normal(shape).astype(np.float32)
    compiled_expected = False
    if case == "broadcast row":
        y = y[:1].copy()
    elif case == "strided x":
        x = rng.standard_normal((6, 16)).astype(np.float32)[:, ::2]
        compiled_expected = True  # (planned for the loop; the strided call runs the xp kernel)
    elif case == "float16":
        x, y = x.astype(np.float16), y.astype(np.float16)
    else:
        condition = np.array([True])
    out = np.full(np.broadcast_shapes(condition.shape, x.shape, y.shape), 7, x.dtype)
    got, compiled = _where(condition, x, y, out=out)
    assert compiled == compiled_expected
    np.testing.assert_array_equal(got, np.where(condition, x, y))
    reference = np.full_like(out, 7)
    xp_kernels["Where"](_ctx(), [condition, x, y], [reference], {})
    np.testing.assert_array_equal(got, reference)


def test_a_plan_step_calls_the_loop_directly_and_falls_back_on_a_strided_view():
    """The bound Where is one function around the loop (``support.direct_call``), not the
    prepared kernel's partial; arrays of the planned types but another layout still get the
    xp kernel's answer through it."""
    import functools

    rng = np.random.default_rng(5)
    condition = rng.random((6, 8)) < 0.5
    x, y = rng.standard_normal((2, 6, 8)).astype(np.float32)
    out = np.full((6, 8), np.nan, np.float32)
    types = array_types([condition, x, y])
    step = bound_kernel(jit.kernels["Where"], pt.cpu().backend, types, array_types([out]), {})
    assert not isinstance(step, functools.partial)
    step(_ctx(), [condition, x, y], [out], {})
    np.testing.assert_array_equal(out, np.where(condition, x, y))
    wide = rng.standard_normal((6, 16)).astype(np.float32)
    out[...] = np.nan
    step(_ctx(), [condition, wide[:, ::2], y], [out], {})  # (same type, strided)
    np.testing.assert_array_equal(out, np.where(condition, wide[:, ::2], y))
