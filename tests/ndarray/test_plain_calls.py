"""The imperative fast path (the per-signature plain call): one Device instance per device,
values against NumPy, kernel contexts shared by threads, device checks and deferred errors
that still run once a signature is cached."""
import threading

import numpy as np
import pytest

from portable import nd
from portable.device import cpu, null
from portable.engine import use_engine
from portable.errors import BackendError, EngineError, ShapeError


@pytest.fixture(params=["naive", "threaded"])
def engine(request):
    with use_engine(request.param) as eng:
        yield eng


def test_equal_devices_become_one_instance(engine):
    a, b = nd.zeros((3,), cpu()), nd.ones((3,), cpu())
    assert a._device is b._device
    assert (a + b)._device is a._device


def test_x_plus_x_and_scalars_match_numpy(engine):
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = nd.array(host)
    y = x + x
    z = (y * 2.0 + 1) - x
    np.testing.assert_array_equal(z.asnumpy(), (host + host) * 2.0 + 1 - host)


def test_chains_in_several_threads_share_kernel_contexts_safely(engine):
    results, errors = {}, []

    def chain(k):
        try:
            x = nd.zeros((4,))
            for _ in range(300):
                x = (x + float(k)).relu()  # (Relu's kernel takes a context; Add's none)
            results[k] = x.asnumpy()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=chain, args=(k,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in range(1, 5):
        np.testing.assert_array_equal(results[k], np.full(4, 300.0 * k, np.float32))


def test_inputs_on_two_devices_are_refused_naming_them(engine):
    a = nd.zeros((2,), cpu())
    b = nd.zeros((2,), null())
    a + a  # (the signature is now cached: the device check must still run)
    with pytest.raises(BackendError, match="different devices"):
        a + b


def test_a_failed_producer_reaches_the_reader_through_cached_calls(engine):
    x = nd.ones((2,))
    x + x  # cache the signature
    bad = nd.ones((2,))
    engine.push(lambda: 1 / 0, writes=[bad._var], name="broken")
    y = (bad + x) * 2.0
    with pytest.raises(EngineError, match="broken"):
        y.wait_to_read()
    engine_ok = (x + x).asnumpy()
    np.testing.assert_array_equal(engine_ok, [2.0, 2.0])
    with pytest.raises(EngineError):
        engine.wait_all()


def test_a_scalar_constant_belongs_to_the_engine_of_its_operand():
    # (the constant a Python scalar becomes is cached: an entry made on one engine must not
    # be handed to an op on another, whose push would refuse its var)
    host = np.arange(4, dtype=np.float32)
    with use_engine("naive"):
        first = (nd.array(host) + 3.0).asnumpy()
    with use_engine("threaded"):
        second = (nd.array(host) + 3.0).asnumpy()
        third = (3.0 - nd.array(host)).asnumpy()
    np.testing.assert_array_equal(first, host + 3.0)
    np.testing.assert_array_equal(second, host + 3.0)
    np.testing.assert_array_equal(third, 3.0 - host)


def test_reflected_and_mixed_operators_match_numpy(engine):
    host = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    x = nd.array(host)
    for _ in range(2):  # (the second round takes the cached calls)
        np.testing.assert_allclose((2.0 / x).asnumpy(), 2.0 / host, rtol=1e-6)
        np.testing.assert_array_equal((1 - x).asnumpy(), 1 - host)
        np.testing.assert_array_equal((x * True).asnumpy(), host)
        np.testing.assert_array_equal((-x).asnumpy(), -host)


def test_a_bound_ufunc_kernel_and_its_direct_call_agree_with_numpy():
    from portable.backend import KernelContext, bound_kernel
    from portable.ir.graph import TensorType

    backend = cpu().backend
    a = np.array([1.5, -2.0, 3.25], np.float32)
    b = np.array([0.5, 4.0, -1.0], np.float32)
    t = TensorType((3,), np.dtype(np.float32))
    for op, expected in (("Add", a + b), ("Sub", a - b), ("Mul", a * b)):
        kernel = backend.kernel(op)
        bound = bound_kernel(kernel, backend, [t, t], [t], {})
        ctx = KernelContext(backend.xp, None, backend)
        out_bound, out_direct = np.empty(3, np.float32), np.empty(3, np.float32)
        assert bound.context_free  # (imperative calls then pass no context: None)
        bound(None, [a, b], [out_bound], {})
        kernel(ctx, [a, b], [out_direct], {})  # (as a fused chain's step calls it)
        np.testing.assert_array_equal(out_bound, expected)
        np.testing.assert_array_equal(out_direct, expected)


def test_the_default_device_is_one_instance_and_follows_the_thread_setting():
    from portable.device import as_device, set_default_device

    assert as_device(None) is as_device(None)
    assert as_device(None) == cpu()
    previous = set_default_device(null())
    try:
        assert as_device(None) == null()
        assert nd.zeros((2,)).device == null()
        seen = []
        thread = threading.Thread(target=lambda: seen.append(as_device(None)))
        thread.start()
        thread.join()
        assert seen == [cpu()]  # (the default is per thread)
    finally:
        set_default_device(previous)
    assert as_device(None) == cpu()


def test_a_failing_inline_op_fails_its_readers_and_one_wait_all(engine):
    from portable.engine import INLINE

    a, b, c = engine.new_var("a"), engine.new_var("b"), engine.new_var("c")
    ran = []
    engine.push(lambda: 1 / 0, writes=[a], device=INLINE, name="broken")  # (does not raise)
    engine.push(lambda: ran.append("reader"), reads=[a], writes=[b], device=INLINE,
                name="reader")
    engine.push(lambda: ran.append("other"), writes=[c], device=INLINE, name="other")
    with pytest.raises(EngineError, match="broken"):
        engine.wait_for_var(b)
    engine.wait_for_var(c)
    assert ran == ["other"]
    with pytest.raises(EngineError, match="broken"):
        engine.wait_all()
    engine.wait_all()  # (each failure is reported by one wait_all)


def test_signed_zero_constants_keep_their_sign(engine):
    # (0.0 == -0.0, so a table keyed by value would hand one the other's constant array)
    host = np.array([-0.0, 0.0, 2.0], np.float32)
    x = nd.array(host)
    for _ in range(2):  # (the second round takes whatever the operators kept)
        for value in (0.0, -0.0):
            np.testing.assert_array_equal(np.signbit((x + value).asnumpy()),
                                          np.signbit(host + np.float32(value)))
            np.testing.assert_array_equal(np.signbit((x * value).asnumpy()),
                                          np.signbit(host * np.float32(value)))
            np.testing.assert_array_equal(np.signbit((value - x).asnumpy()),
                                          np.signbit(np.float32(value) - host))


def test_operators_alternating_signatures_match_numpy(engine):
    # (an operator keeps its last signature's call and scalar constant: alternating shapes,
    # dtypes, operand order and scalars must each still get their own)
    rng = np.random.default_rng(0)
    hosts = [rng.standard_normal(s).astype(np.float32) for s in ((4,), (2, 3), (3,))]
    hosts.append(rng.standard_normal(4).astype(np.float64))
    arrays = [nd.array(h, dtype=h.dtype) for h in hosts]
    for _ in range(3):
        for host, array in zip(hosts, arrays):
            for value in (2, 2.5, True, 0.0, -0.0):
                constant = np.asarray(value).astype(host.dtype)  # (Python scalars take x's)
                got = (array + value).asnumpy()
                assert got.dtype == host.dtype
                np.testing.assert_array_equal(got, host + constant)
                np.testing.assert_array_equal((value - array).asnumpy(), constant - host)
            np.testing.assert_array_equal((array * array).asnumpy(), host * host)
    with pytest.raises(ShapeError):
        arrays[0] + arrays[2]  # (4,) and (3,): the type rule still runs for a new pair
