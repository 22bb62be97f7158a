"""The imperative fast path (the per-signature plain call): one Device instance per device,
values against NumPy, kernel contexts shared by threads, device checks and deferred errors
that still run once a signature is cached."""
import threading

import numpy as np
import pytest

from portable import nd
from portable.device import cpu, null
from portable.engine import use_engine
from portable.errors import BackendError, EngineError


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
                x = x + float(k)
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
