"""NDArray: creation, operators, indexing, copies, DLPack, random, and asynchronous errors, on
both engines."""
import numpy as np
import pytest

import portable as pt
from portable import nd
from portable.engine import use_engine
from portable.errors import EngineError, ShapeError
from portable.ops import registry
from portable.ops.naming import function_name


@pytest.fixture(params=["naive", "threaded"], autouse=True)
def engine(request):
    with use_engine(request.param) as eng:
        yield eng


def test_creation_functions():
    assert nd.array([1, 2]).dtype == np.float32
    # MXNet 1.x: NumPy data of any dtype become float32 unless dtype= says otherwise
    # (recorded from MXNet in tests/mxnet_fidelity/fixtures)
    assert nd.array(np.arange(3)).dtype == np.float32
    assert nd.array(np.arange(3), dtype=np.int64).dtype == np.int64
    np.testing.assert_array_equal(nd.zeros((2, 3)).asnumpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(nd.ones(4, dtype="int64").asnumpy(), np.ones(4, np.int64))
    np.testing.assert_array_equal(nd.full((2,), 7.5).asnumpy(), [7.5, 7.5])
    np.testing.assert_array_equal(nd.arange(5).asnumpy(), np.arange(5, dtype=np.float32))
    assert nd.empty((3, 2)).shape == (3, 2)
    x = nd.array([[1.0, 2.0]])
    assert x.device == pt.cpu() and x.context == pt.cpu() and x.ndim == 2 and x.size == 2


def test_arithmetic_and_comparisons_broadcast_like_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32) + 3
    x, y = nd.array(a), nd.array(b)
    np.testing.assert_allclose((x + y).asnumpy(), a + b)
    np.testing.assert_allclose((x - y).asnumpy(), a - b)
    np.testing.assert_allclose((x * y).asnumpy(), a * b)
    np.testing.assert_allclose((x / y).asnumpy(), a / b, rtol=1e-6)
    np.testing.assert_allclose((2 - x).asnumpy(), 2 - a)
    np.testing.assert_allclose((1 / y).asnumpy(), 1 / b, rtol=1e-6)
    np.testing.assert_allclose((y ** 2).asnumpy(), b ** 2, rtol=1e-6)
    np.testing.assert_allclose((-x).asnumpy(), -a)
    np.testing.assert_array_equal((x > 0).asnumpy(), a > 0)
    np.testing.assert_array_equal((x <= 0).asnumpy(), a <= 0)
    np.testing.assert_allclose((x @ nd.array(a.T)).asnumpy(), a @ a.T, rtol=1e-5)
    np.testing.assert_allclose(x.sum(axis=1).asnumpy(), a.sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(x.mean().asnumpy(), a.mean(), rtol=1e-5)
    np.testing.assert_array_equal(x.argmax(axis=1).asnumpy(), a.argmax(axis=1))
    np.testing.assert_allclose(x.T.asnumpy(), a.T)
    np.testing.assert_allclose(x.reshape((4, 3)).asnumpy(), a.reshape(4, 3))


def test_in_place_operators_write_the_same_array():
    x = nd.array([1.0, 2.0])
    before = x
    x += 1
    x *= nd.array([2.0, 3.0])
    assert x is before
    np.testing.assert_array_equal(x.asnumpy(), [4.0, 9.0])


@pytest.mark.parametrize("key", [1, -1, slice(1, 3), slice(None, None, -1), (0, slice(1, None)),
                                 (Ellipsis, 2), (None, 1), (slice(None), None, 0),
                                 (slice(3, 0, -2), slice(None))])
def test_basic_indexing_matches_numpy(key):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(nd.array(a)[key].asnumpy(), a[key])


def test_array_indexing_and_slice_assignment():
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    x = nd.array(a)
    np.testing.assert_array_equal(x[[2, 0, 2]].asnumpy(), a[[2, 0, 2]])
    x[1] = 0.0
    x[2:, 1] = nd.array([7.0, 8.0])
    x[:] = x.asnumpy() + 1  # full assignment from NumPy
    a[1] = 0.0
    a[2:, 1] = [7.0, 8.0]
    np.testing.assert_array_equal(x.asnumpy(), a + 1)
    with pytest.raises(IndexError):
        x[5]


def test_every_onnx_op_has_an_nd_function():
    missing = [name for name, op in registry.ops.items()
               if not op.domain and not hasattr(nd, function_name(op))]
    assert not missing


def test_generated_functions_take_tensor_inputs_by_name():
    x = nd.array(np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(nd.reshape(x, shape=(2, -1)).asnumpy(),
                                  np.arange(6).reshape(2, 3))
    np.testing.assert_allclose(nd.softmax(nd.array([[0.0, 0.0]]), axis=1).asnumpy(),
                               [[0.5, 0.5]])
    out = nd.zeros((6,))
    nd.relu(x - 2, out=out)
    np.testing.assert_array_equal(out.asnumpy(), np.maximum(np.arange(6) - 2, 0))


def test_shape_errors_are_raised_at_the_call():
    with pytest.raises(ShapeError, match="MatMul"):
        nd.array(np.ones((2, 3))) @ nd.array(np.ones((4, 5)))


def test_kernel_failure_surfaces_at_the_next_read_and_engine_goes_on():
    x = nd.array(np.ones((3, 2)))
    bad = nd.gather(x, nd.array([7], dtype=np.int64), axis=0)  # index out of range
    good = x + 1
    with pytest.raises(EngineError, match="Gather"):
        bad.asnumpy()
    np.testing.assert_array_equal(good.asnumpy(), np.full((3, 2), 2.0))
    with pytest.raises(EngineError):
        (bad * 2).asnumpy()  # readers of a failed array fail too
    np.testing.assert_array_equal((x * 3).asnumpy(), np.full((3, 2), 3.0))


def test_copies_devices_numpy_protocol_and_dlpack():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = nd.array(a)
    y = x.copyto(pt.cpu())
    z = nd.zeros((2, 3))
    x.copyto(z)
    x[:] = 0
    np.testing.assert_array_equal(y.asnumpy(), a)
    np.testing.assert_array_equal(z.asnumpy(), a)
    assert x.as_in_context(pt.cpu()) is x
    np.testing.assert_array_equal(np.asarray(y), a)
    np.testing.assert_array_equal(np.from_dlpack(y), a)
    w = nd.from_dlpack(a)
    np.testing.assert_array_equal(w.asnumpy(), a)
    np.testing.assert_array_equal(y.astype("int64").asnumpy(), a.astype(np.int64))


def test_random_is_reproducible_with_a_seed():
    pt.random.seed(42)
    first = [nd.random.uniform(shape=(3,)).asnumpy(), nd.random.normal(shape=(2, 2)).asnumpy(),
             nd.random.randint(0, 10, shape=(4,)).asnumpy()]
    pt.random.seed(42)
    second = [nd.random.uniform(shape=(3,)).asnumpy(), nd.random.normal(shape=(2, 2)).asnumpy(),
              nd.random.randint(0, 10, shape=(4,)).asnumpy()]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert ((first[0] >= 0) & (first[0] < 1)).all()


def test_waitall_and_wait_to_read():
    xs = [nd.array(np.full((4,), float(i))) * 2 for i in range(20)]
    nd.waitall()
    assert xs[5].wait_to_read() is xs[5]
    np.testing.assert_array_equal(xs[19].asnumpy(), np.full((4,), 38.0))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "int8"])
def test_a_python_int_operand_takes_the_integer_arrays_dtype(dtype):
    """MXNet's scalar operators (``_plus_scalar`` ...) cast the scalar to the array's dtype:
    int32 + 1 is int32 (it used to fail: the constant was made int64). Checked against NumPy
    with the scalar cast to the array's dtype first, for each operator and side."""
    host = np.array([1, 5, 7, 100], dtype)
    x = nd.array(host, dtype=dtype)
    two = np.array(2, dtype)
    cases = {"x + 2": (lambda: x + 2, host + two), "2 + x": (lambda: 2 + x, two + host),
             "x - 1": (lambda: x - 1, host - np.array(1, dtype)),
             "x * 2": (lambda: x * 2, host * two), "x ** 2": (lambda: x ** 2, host ** two),
             "x + np.int64(2)": (lambda: x + np.int64(2), host + two),
             "x + True": (lambda: x + True, host + np.array(1, dtype))}
    for name, (run, expected) in cases.items():
        got = run()
        assert got.dtype == np.dtype(dtype), name
        np.testing.assert_array_equal(got.asnumpy(), expected, err_msg=name)
    y = x.copy()
    y += 3
    np.testing.assert_array_equal(y.asnumpy(), host + np.array(3, dtype))


def test_an_int_operand_that_does_not_fit_the_arrays_dtype_is_refused():
    from portable.errors import OpError

    x = nd.array([1, 2], dtype="uint8")
    with pytest.raises(OpError, match="300 does not fit the array's dtype uint8"):
        x + 300
