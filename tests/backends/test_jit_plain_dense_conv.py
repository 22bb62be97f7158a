"""The plain Conv (no epilogue: a training graph's Conv) on the compiled dense plan
(backends/numpy/jit/plain_conv.py's tiers, ``dense_conv.DensePlan.for_plain_conv``).

The plan sums in another order than the xp kernel's sgemm, so its results are checked against
a float64 reference (the xp kernel on float64 copies) and against the xp kernel in the same
dtype, to rounding; and a run repeated gives the same bits."""
from __future__ import annotations

import numpy as np
import pytest

import portable as pt
from backends.numpy import jit
from portable.backend import KernelContext, array_types, bound_kernel
from portable.ops import registry
from portable.ops.conv import window_geometry

pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (pip install 'portable[jit]')")


def _ctx():
    return KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)


def _attrs(**given):
    return {key: given.get(key, spec.default) for key, spec in registry.get("Conv").attrs.items()}


def _out_shape(x, w, attrs):
    return (x.shape[0], w.shape[0]) + tuple(window_geometry(x.shape[2:], w.shape[2:], attrs).out)


def _xp(inputs, shape, dtype, attrs):
    from backends.xp.kernels import kernels as xp_kernels

    y = np.full(shape, -7, dtype)
    xp_kernels["Conv"](_ctx(), inputs, [y], attrs)
    return y


def _reference(inputs, shape, attrs):
    """float64: the xp kernel on float64 copies."""
    return _xp([a.astype(np.float64) for a in inputs], shape, np.float64, attrs)


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)


def _planned(inputs, shape, attrs):
    """The dense plan the compiled Conv chose, or None."""
    from backends.numpy.jit import plain_conv

    state = plain_conv.conv.compiled_prepare(array_types(inputs),
                                             array_types([np.empty(shape, inputs[0].dtype)]),
                                             attrs)
    return None if state is None else state[1]


def _random_case(seed):
    """A dense 2-D Conv of group 1 with random stride, pads (or auto_pad), dilation, batch
    1-4 and dtype, with C * kh * kw around the stacked loop's threshold, so that both the
    stacked layout and the columns one come up."""
    rng = np.random.default_rng(900 + seed)
    kernel = [int(k) for k in rng.integers(1, 5, 2)]
    c = int(rng.integers(4, 40))
    m = int(rng.integers(1, 24))
    given = dict(strides=[int(s) for s in rng.integers(1, 3, 2)],
                 dilations=[int(d) for d in rng.integers(1, 3, 2)],
                 pads=[int(rng.integers(0, k + 1)) for k in kernel * 2])
    if seed % 5 == 4:
        given = dict(auto_pad=["SAME_UPPER", "SAME_LOWER", "VALID"][seed % 3],
                     strides=given["strides"])
    reach = [(k - 1) * d + 1 for k, d in zip(kernel, given.get("dilations", [1, 1]))]
    size = [int(rng.integers(r, r + 14)) for r in reach]
    dtype = (np.float32, np.float64)[seed % 2]
    x = rng.standard_normal((int(rng.integers(1, 5)), c, *size)).astype(dtype)
    w = rng.standard_normal((m, c, *kernel)).astype(dtype)
    b = rng.standard_normal(m).astype(dtype) if seed % 3 == 0 else None
    return [x, w] + ([] if b is None else [b]), _attrs(**given)


CASES = [_random_case(seed) for seed in range(40)]


@pytest.mark.parametrize("seed", range(len(CASES)))
def test_random_plain_convs_match_the_reference(seed):
    """Every random Conv through the compiled table entry (prepared, then run, as an
    unplanned call runs it) against the float64 reference and the xp kernel; where the dense
    plan takes it, its compiled call alone too, run twice to the same bits."""
    from backends.numpy.jit import plain_conv

    inputs, attrs = CASES[seed]
    x, w = inputs[:2]
    shape = _out_shape(x, w, attrs)
    want = _reference(inputs, shape, attrs)
    y = np.full(shape, -7, x.dtype)
    jit.kernels["Conv"](_ctx(), inputs, [y], attrs)
    np.testing.assert_allclose(y, want, **_tol(x.dtype))
    np.testing.assert_allclose(y, _xp(inputs, shape, x.dtype, attrs), **_tol(x.dtype))
    plan = _planned(inputs, shape, attrs)
    if plan is None:
        return
    state = (None, plan, None)
    ctx = _ctx()
    first = np.full(shape, -7, x.dtype)
    assert plain_conv.conv.compiled_run(state, ctx, inputs, [first], attrs)
    again = np.full(shape, 7, x.dtype)
    assert plain_conv.conv.compiled_run(state, ctx, inputs, [again], attrs)
    np.testing.assert_allclose(first, want, **_tol(x.dtype))
    assert first.tobytes() == again.tobytes()


def test_random_cases_reach_both_layouts():
    """The random cases above exercise the stacked layout and the columns one."""
    layouts = set()
    for inputs, attrs in CASES:
        plan = _planned(inputs, _out_shape(inputs[0], inputs[1], attrs), attrs)
        layouts.add(None if plan is None else plan.layout)
    assert {"stacked", "columns"} <= layouts


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [
    ((4, 16, 8, 8), (16, 16, 3, 3), dict(pads=[1, 1, 1, 1])),  # stacked, padded
    ((3, 20, 12, 12), (10, 20, 5, 5), {}),  # LeNet's second Conv, smaller: stacked, unpadded
    ((2, 32, 9, 9), (8, 32, 3, 3), dict(strides=[2, 2], pads=[1, 0, 1, 1])),  # stacked, s2
    ((4, 1, 12, 12), (5, 1, 5, 5), {}),  # LeNet's first Conv, smaller: columns
])
def test_bound_step_follows_weights_changed_in_place(shape, dtype):
    """A plan's bound step, as training runs it: the same (writeable) weight array updated in
    place between runs, the output buffer stale; each run uses the weight it is handed."""
    x_shape, w_shape, given = shape
    attrs = _attrs(**given)
    rng = np.random.default_rng(5)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    out = _out_shape(x, w, attrs)
    assert _planned([x, w, b], out, attrs) is not None
    step = bound_kernel(jit.kernels["Conv"], pt.cpu().backend, array_types([x, w, b]),
                        array_types([np.empty(out, dtype)]), attrs)
    ctx = _ctx()
    y = np.empty(out, dtype)
    for run in range(3):
        w -= 0.1 * rng.standard_normal(w_shape).astype(dtype)  # (an SGD update, in place)
        x[...] = rng.standard_normal(x_shape)
        y[...] = np.nan
        step(ctx, [x, w, b], [y], attrs)
        np.testing.assert_allclose(y, _reference([x, w, b], out, attrs), **_tol(dtype),
                                   err_msg=f"run {run}")


def test_read_only_weight_kept_reordered_until_another_is_handed():
    """A read-only weight (a graph's initializer) is reordered once and kept; a plan handed
    another array gets that one's products."""
    attrs = _attrs(pads=[1, 1, 1, 1])
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 16, 6, 6)).astype(np.float32)
    weights = [rng.standard_normal((8, 16, 3, 3)).astype(np.float32) for _ in range(2)]
    for w in weights:
        w.setflags(write=False)
    out = _out_shape(x, weights[0], attrs)
    step = bound_kernel(jit.kernels["Conv"], pt.cpu().backend, array_types([x, weights[0]]),
                        array_types([np.empty(out, np.float32)]), attrs)
    ctx = _ctx()
    for w in (weights[0], weights[0], weights[1], weights[0]):
        y = np.empty(out, np.float32)
        step(ctx, [x, w], [y], attrs)
        np.testing.assert_allclose(y, _reference([x, w], out, attrs), **_tol(np.float32))


def test_other_layouts_give_the_xp_answer():
    """Arrays the plan does not index (a strided input, a strided output) run the xp kernel;
    the bound step hands them over."""
    attrs = _attrs(pads=[1, 1, 1, 1])
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 16, 8, 16)).astype(np.float32)[:, :, :, ::2]
    w = rng.standard_normal((8, 16, 3, 3)).astype(np.float32)
    out = _out_shape(x, w, attrs)
    assert _planned([x, w], out, attrs) is not None
    step = bound_kernel(jit.kernels["Conv"], pt.cpu().backend, array_types([x, w]),
                        array_types([np.empty(out, np.float32)]), attrs)
    wide = np.full(out[:3] + (2 * out[3],), -7, np.float32)
    step(_ctx(), [x, w], [wide[:, :, :, ::2]], attrs)
    np.testing.assert_array_equal(wide[:, :, :, ::2], _xp([x, w], out, np.float32, attrs))


def test_shapes_left_to_the_xp_kernel():
    """A 1x1 Conv at stride 1 without padding (one sgemm on X either way), a short window run
    on outputs of a few positions at batch > 1 (the xp kernel's batch-wide GEMM wins) and a
    float16 Conv keep the xp kernel; the same short run at batch 1 takes the columns."""
    rng = np.random.default_rng(8)

    def planned(x_shape, w_shape, dtype=np.float32, **given):
        attrs = _attrs(**given)
        x, w = (rng.standard_normal(s).astype(dtype) for s in (x_shape, w_shape))
        plan = _planned([x, w], _out_shape(x, w, attrs), attrs)
        return None if plan is None else plan.layout

    assert planned((4, 64, 8, 8), (32, 64, 1, 1)) is None
    assert planned((4, 8, 4, 4), (16, 8, 3, 3), pads=[1, 1, 1, 1], strides=[2, 2]) is None
    assert planned((1, 8, 4, 4), (16, 8, 3, 3), pads=[1, 1, 1, 1], strides=[2, 2]) == "columns"
    assert planned((4, 16, 8, 8), (16, 16, 3, 3), np.float16, pads=[1, 1, 1, 1]) is None
    assert planned((4, 16, 4, 4), (16, 16, 3, 3), pads=[1, 1, 1, 1]) == "stacked"


def test_stacked_image_in_the_padded_buffer_drops_its_border_stamp():
    """The stacked loop writes its transposed image into the shared "padded" buffer; a Conv
    that kept its zero border there (the stamp of ``im2col.mark_border``) must write it
    again on its next run instead of reading the image's values as padding."""
    from backends.numpy.jit.dense_conv import DensePlan

    rng = np.random.default_rng(9)
    ctx = _ctx()
    convs = []
    for x_shape, w_shape, attrs in (
            ((1, 3, 8, 8), (4, 3, 3, 3), _attrs(pads=[1, 1, 1, 1], strides=[2, 2])),
            ((1, 16, 8, 8), (16, 16, 3, 3), _attrs(pads=[1, 1, 1, 1]))):
        x, w = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, w_shape))
        out = _out_shape(x, w, attrs)
        plan = DensePlan(array_types([x, w]), array_types([np.empty(out, np.float32)]), attrs)
        convs.append((plan, x, w, np.empty(out, np.float32), attrs))
    assert [c[0].layout for c in convs] == ["columns", "stacked"]
    ctx.workspace.update(padded=np.empty(1 << 16, np.uint8), columns=np.empty(1 << 16, np.uint8))
    for plan, x, w, y, attrs in convs + convs[:1]:
        x[...] = rng.standard_normal(x.shape)
        plan.conv(ctx, x, w, y)
        np.testing.assert_allclose(y, _reference([x, w], y.shape, attrs), **_tol(np.float32))


def test_held_rule_counts_the_kept_reordered_weight():
    from backends.numpy.jit import plain_conv

    attrs = _attrs(pads=[1, 1, 1, 1])
    x, w = np.empty((2, 16, 8, 8), np.float32), np.empty((16, 16, 3, 3), np.float32)
    out = array_types([np.empty(_out_shape(x, w, attrs), np.float32)])
    assert plain_conv.conv.held(array_types([x, w]), out, attrs) == w.nbytes
    w1 = np.empty((16, 16, 1, 1), np.float32)
    out1 = array_types([np.empty((2, 16, 8, 8), np.float32)])
    assert plain_conv.conv.held(array_types([x, w1]), out1, _attrs()) == 0


def test_a_conv_given_every_blas_thread_runs_sgemm_while_the_run_allows_several(monkeypatch):
    """The plan's loops run on one thread: a step large enough to get every allowed BLAS
    thread (``threads.step_threads``) runs the xp kernel's sgemm while BLAS runs several (its
    answer, bit for bit), and the plan at one thread."""
    from backends.numpy import threads
    from backends.numpy.jit import plain_conv

    # (the plan's stacked loop; Winograd would take this shape, with its own error bound)
    monkeypatch.setenv("PORTABLE_WINOGRAD", "0")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 64, 32, 32)).astype(np.float32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    attrs = _attrs(pads=[1, 1, 1, 1])
    shape = _out_shape(x, w, attrs)
    types, out = array_types([x, w]), array_types([np.empty(shape, np.float32)])
    assert threads.step_threads("Conv", types, out, attrs)  # (the shape earns the threads)
    assert _planned([x, w], shape, attrs) is not None
    step = plain_conv.conv.bind(pt.cpu().backend, types, out, attrs)
    ran = []
    real = plain_conv._run_dense
    monkeypatch.setattr(plain_conv, "_run_dense", lambda *a: ran.append(1) or real(*a))
    for count, planned in ((2, False), (1, True)):
        monkeypatch.setattr(threads.blas_threads, "current", count)
        ran.clear()
        y = np.full(shape, -7, np.float32)
        step(_ctx(), [x, w], [y], attrs)
        assert bool(ran) == planned, count
        if not planned:
            np.testing.assert_array_equal(y, _xp([x, w], shape, np.float32, attrs))
        np.testing.assert_allclose(y, _reference([x, w], shape, attrs), **_tol(np.float32))
