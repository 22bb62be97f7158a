"""Kept elementwise launches (``backends.opencl.launch``): a call with a layout seen before
reuses that call's kernel and arguments with its own buffers and offsets. Each case calls the
same layout twice or more on different data and checks every result against NumPy, so a
launch that kept a buffer, an offset, a scalar or a stride of an earlier call fails."""
import numpy as np
import pytest

from backends.opencl.codegen import Fused
from backends.opencl.elementwise import apply, run_elementwise
from backends.opencl.optable import TABLE


def _launches(backend):
    return backend.runtime.memo("ew_launches")


def test_second_call_reuses_the_launch_with_its_own_buffers(backend):
    xp = backend.xp
    rng = np.random.default_rng(0)
    hosts = [rng.standard_normal((3, 257), dtype=np.float32) for _ in range(4)]
    a, b, c, d = (xp.asarray(h) for h in hosts)
    first = apply("Add", a, b)
    kept = len(_launches(backend))
    second = apply("Add", c, d)
    assert len(_launches(backend)) == kept  # the same layout: no new launch worked out
    np.testing.assert_array_equal(first.get(), hosts[0] + hosts[1])
    np.testing.assert_array_equal(second.get(), hosts[2] + hosts[3])


def test_views_at_other_offsets_read_their_own_elements(backend):
    xp = backend.xp
    host = np.arange(40, dtype=np.float32).reshape(4, 10)
    x = xp.asarray(host)
    out = xp.asarray(np.zeros((4, 10), np.float32))
    for row in range(4):  # one layout (a row of 10), four offsets in and out
        apply("Mul", x[row], 2.0, out=out[3 - row])
    np.testing.assert_array_equal(out.get(), 2 * host[::-1])


def test_scalar_values_and_types_are_part_of_the_layout(backend):
    xp = backend.xp
    host = np.linspace(-3, 3, 11, dtype=np.float32)
    x = xp.asarray(host)
    for scalar in (1.5, 2.5, 2, np.float32(0.25)):
        np.testing.assert_allclose(apply("Mul", x, scalar).get(), host * scalar, rtol=1e-6)
    ints = xp.asarray(np.arange(5, dtype=np.int32))
    assert apply("Add", ints, 1).dtype == np.int32  # a weak Python int keeps int32
    if backend.runtime.device.fp64:  # ... a float promotes (to float64), though 1 == 1.0
        floats = apply("Add", ints, 1.0)
        assert floats.dtype == np.float64
        np.testing.assert_allclose(floats.get(), np.arange(5) + 1.0)


def test_same_shape_other_strides_get_their_own_launch(backend):
    xp = backend.xp
    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = xp.asarray(host)
    np.testing.assert_array_equal(apply("Neg", x[:, :4]).get(), -host[:, :4])
    np.testing.assert_array_equal(apply("Neg", x.T[:4, :4]).get(), -host.T[:4, :4])
    np.testing.assert_array_equal(apply("Neg", x[:4, 2:]).get(), -host[:4, 2:])


def test_overlapping_output_after_a_kept_launch_still_copies(backend):
    """``x[1:] = x[:-1] + 1`` reads the old values (NumPy's overlap rule) even when the
    layout's launch was kept from a call without overlap."""
    xp = backend.xp
    host = np.arange(10, dtype=np.float32)
    x, other = xp.asarray(host), xp.asarray(host * 10)
    out = xp.asarray(np.zeros(9, np.float32))
    apply("Add", other[:-1], 1.0, out=out)  # kept: a view of 9 in, a view of 9 out
    apply("Add", x[:-1], 1.0, out=x[1:])
    expected = host.copy()
    expected[1:] = host[:-1] + 1
    np.testing.assert_array_equal(x.get(), expected)
    np.testing.assert_array_equal(out.get(), host[:-1] * 10 + 1)


def test_in_place_update_keeps_the_launch(backend):
    xp = backend.xp
    host = np.ones(1000, np.float32)
    x, step = xp.asarray(host), xp.asarray(np.full(1000, 0.5, np.float32))
    for _ in range(3):
        apply("Sub", x, step, out=x)
    np.testing.assert_array_equal(x.get(), host - 1.5)


@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 64, 7, 7)])
def test_fused_expression_with_two_outputs_and_broadcast(backend, shape):
    xp = backend.xp
    rng = np.random.default_rng(1)
    fused = Fused(3)
    t = fused.add(TABLE["Mul"], fused.input(0), fused.input(1))
    fused.add(TABLE["Add"], t, fused.input(2))
    fused.add(TABLE["Relu"], ("t", 1))
    bias_shape = (1,) + shape[1:2] + (1,) * (len(shape) - 2)
    for _ in range(2):
        a = rng.standard_normal(shape).astype(np.float32)
        b = rng.standard_normal(shape).astype(np.float32)
        bias = rng.standard_normal(bias_shape).astype(np.float32)
        pre, post = run_elementwise(fused.steps, [xp.asarray(a), xp.asarray(b),
                                                  xp.asarray(bias)], [None, None])
        np.testing.assert_allclose(pre.get(), a * b + bias, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(post.get(), np.maximum(a * b + bias, 0), rtol=1e-6,
                                   atol=1e-6)


def test_empty_results_are_not_kept(backend):
    xp = backend.xp
    empty = xp.asarray(np.zeros((0, 4), np.float32))
    before = len(_launches(backend))
    assert apply("Add", empty, 1.0).shape == (0, 4)
    assert len(_launches(backend)) == before


def test_gemm_keeps_its_launches_across_operands_and_offsets(backend):
    """The pack and multiply launches of one layout, called on views at other offsets of
    other buffers: each product is its own (against NumPy in float64)."""
    from backends.opencl.gemm import gemm

    xp = backend.xp
    rng = np.random.default_rng(2)
    big = [rng.standard_normal((3, 20, 13)).astype(np.float32) for _ in range(2)]
    bs = [rng.standard_normal((13, 9)).astype(np.float32) for _ in range(2)]
    for host_a, host_b in zip(big, bs):
        a, b = xp.asarray(host_a), xp.asarray(host_b)
        for i in range(3):  # A's rows at three offsets, into C's three slices
            c = xp.asarray(np.zeros((3, 20, 9), np.float32))
            backend.runtime.touch(a)  # (new data, as activations are: packed again)
            gemm(a[i], b, c[2 - i])
            np.testing.assert_allclose(c.get()[2 - i], host_a[i].astype(np.float64) @ host_b,
                                       rtol=1e-5, atol=1e-5)


def test_gemm_epilogue_parts_are_filled_per_call(backend):
    from backends.opencl.gemm import Epilogue, gemm

    xp = backend.xp
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 7, 11)).astype(np.float32)
    b = rng.standard_normal((11, 10)).astype(np.float32)
    for seed in range(2):
        bias = np.random.default_rng(seed).standard_normal(7).astype(np.float32)
        z = np.random.default_rng(seed + 10).standard_normal((2, 7, 10)).astype(np.float32)
        c = xp.asarray(np.zeros((2, 7, 10), np.float32))
        gemm(xp.asarray(a), xp.asarray(b), c,
             epilogue=Epilogue(bias=xp.asarray(bias), residual=xp.asarray(z), low=0.0))
        want = np.maximum(a.astype(np.float64) @ b + bias[:, None] + z, 0)
        np.testing.assert_allclose(c.get(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float16])
def test_strided_copies_by_rows(backend, dtype):
    """Copies with long contiguous rows (``row_copy``): a channel shuffle, a copy into a
    column slice, and a row shorter than the row path takes, each against NumPy."""
    xp = backend.xp
    host = (np.arange(4 * 34 * 28 * 28) % 251).astype(dtype).reshape(1, 4, 34, 28, 28)
    x = xp.asarray(host)
    shuffled = xp.asarray(np.zeros((1, 34, 4, 28, 28), dtype))
    apply("Cast", x.transpose(0, 2, 1, 3, 4), out=shuffled)
    np.testing.assert_array_equal(shuffled.get(), host.transpose(0, 2, 1, 3, 4))
    wide = xp.asarray(np.zeros((3, 50), dtype))
    apply("Cast", xp.asarray(host.reshape(-1)[:60].reshape(3, 20)), out=wide[:, 17:37])
    want = np.zeros((3, 50), dtype)
    want[:, 17:37] = host.reshape(-1)[:60].reshape(3, 20)
    np.testing.assert_array_equal(wide.get(), want)
    short = xp.asarray(np.zeros((5, 3), dtype))
    apply("Cast", xp.asarray(host.reshape(-1)[:15].reshape(3, 5)).T, out=short)
    np.testing.assert_array_equal(short.get(), host.reshape(-1)[:15].reshape(3, 5).T)
