"""The OpenCL backend itself: arrays and views, generated kernels, GEMM, the program cache,
device selection, honest placement (missing kernels and the explicit CPU fallback)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from portable.errors import BackendError, MissingDependencyError, MissingKernelError


def test_describe_names_the_device(backend):
    text = backend.describe()
    assert text.startswith("OpenCL on ") and "kernels" in text
    assert backend.alignment >= 4 and backend.alignment & (backend.alignment - 1) == 0


def test_round_trip_keeps_shape_dtype_and_zero_dims(backend):
    for value in (np.arange(12, dtype=np.float32).reshape(3, 4), np.array(3.5),
                  np.zeros((0, 3), np.int64), np.array([True, False]),
                  np.arange(6, dtype=np.float16), np.arange(5, dtype=np.uint8)):
        back = backend.to_numpy(backend.from_numpy(value))
        assert back.shape == value.shape and back.dtype == value.dtype
        np.testing.assert_array_equal(back, value)


def test_views_share_the_buffer_and_read_right(backend):
    host = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = backend.from_numpy(host)
    for key in (np.s_[1], np.s_[:, 1:, ::2], np.s_[..., ::-1], np.s_[None, 0, :, 2]):
        view = x[key]
        assert view.buffer is x.buffer
        np.testing.assert_array_equal(view.get(), host[key])
    np.testing.assert_array_equal(x.transpose(2, 0, 1).get(), host.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.T.reshape(4, 6).get(), host.T.reshape(4, 6))


def test_setitem_and_numpy_operators(backend):
    xp = backend.xp
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = xp.asarray(host)
    x[1:, ::2] = 7
    expected = host.copy()
    expected[1:, ::2] = 7
    np.testing.assert_array_equal(x.get(), expected)
    y = 2.0 * x - x / 4 + np.float32(1)
    np.testing.assert_allclose(y.get(), 2 * expected - expected / 4 + 1)
    y -= np.float32(0.5) * x
    np.testing.assert_allclose(y.get(), 1.5 * expected - expected / 4 + 1, rtol=1e-6)
    np.testing.assert_array_equal((x > 5).get(), expected > 5)
    np.testing.assert_allclose(xp.sqrt(x).get(), np.sqrt(expected), rtol=1e-6)
    np.testing.assert_allclose(xp.clip(x, 1, 6).get(), np.clip(expected, 1, 6))


def test_reductions_short_and_long_rows(backend):
    xp = backend.xp
    rng = np.random.default_rng(0)
    for shape, axis in (((5, 7, 3), (0, 2)), ((3, 50000), 1), ((40000,), None),
                        ((2, 3, 4, 5, 6), (0, 2, 4))):
        host = rng.standard_normal(shape).astype(np.float32)
        x = xp.asarray(host)
        np.testing.assert_allclose(x.sum(axis=axis).get(), host.sum(axis=axis), rtol=2e-4,
                                   atol=2e-3)
        np.testing.assert_allclose(x.max(axis=axis).get(), host.max(axis=axis))
        np.testing.assert_allclose(x.mean(axis=axis).get(), host.mean(axis=axis), rtol=2e-4,
                                   atol=1e-5)
    values = np.array([[1.0, np.nan, 3.0], [2.0, 5.0, 5.0]], np.float32)
    x = xp.asarray(values)
    np.testing.assert_array_equal(x.max(axis=1).get(), [np.nan, 5.0])
    np.testing.assert_array_equal(x.argmax(axis=1).get(), np.argmax(values, axis=1))


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 13, 5), (64, 64, 64), (33, 130, 17)])
def test_gemm_matches_numpy_with_transposes_and_batches(backend, shape):
    xp = backend.xp
    m, k, n = shape
    rng = np.random.default_rng(1)
    a = rng.standard_normal((k, m)).astype(np.float32)
    b = rng.standard_normal((3, k, n)).astype(np.float32)
    got = (xp.asarray(a).T @ xp.asarray(b)).get()
    np.testing.assert_allclose(got, a.T @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape, a_key, b_shape", [
    ((13, 40), np.s_[:, 3:30], (2, 27, 19)),      # rows 40 apart, broadcast over a batch
    ((2, 3, 7, 9), np.s_[:, :, :, :], (3, 9, 33)),  # batched A, B broadcast over the first
    ((1, 301), np.s_[:, :], (301, 5)),              # one row: the GEMV path
    ((11, 64), np.s_[::2, :], (64, 64))])           # every other row (M = 6, not a tile)
def test_gemm_reads_a_in_place_with_any_row_stride(backend, a_shape, a_key, b_shape):
    """A whose rows are contiguous along k is read where it lies (no packing on CPUs):
    strided rows, batch broadcasting and a last tile cut short, against float64."""
    xp = backend.xp
    rng = np.random.default_rng(4)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    got = (xp.asarray(a)[a_key] @ xp.asarray(b)).get()
    want = a[a_key].astype(np.float64) @ b
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gemm_alpha_beta_accumulates(backend):
    from backends.opencl.gemm import gemm

    xp = backend.xp
    a, b = np.ones((9, 3), np.float32), np.full((3, 17), 2.0, np.float32)
    c = xp.asarray(np.full((9, 17), 1.0, np.float32))
    gemm(xp.asarray(a), xp.asarray(b), c, alpha=0.5, beta=2.0)
    np.testing.assert_allclose(c.get(), 0.5 * a @ b + 2.0)


def test_family_kernels_serve_many_ops_with_one_program(backend):
    """Unary ops of one dtype share one compiled kernel (PoCL compiles slowly)."""
    xp = backend.xp
    x = xp.asarray(np.linspace(-2, 2, 9, dtype=np.float32))
    memo = backend.runtime.memo("family_kernels")
    [fn(x) for fn in (xp.exp, xp.tanh, xp.abs, xp.negative, xp.square)]
    f32 = np.dtype(np.float32)
    keys = [k for k in memo if k[0] == 1 and k[1] == (f32,) and k[3] == f32]
    assert len({k[:4] for k in keys}) == 1


def test_fused_expression_is_one_kernel(backend):
    from backends.opencl.codegen import Fused
    from backends.opencl.elementwise import run_elementwise
    from backends.opencl.optable import TABLE

    xp = backend.xp
    a = np.linspace(-1, 1, 10, dtype=np.float32)
    b = np.linspace(2, 3, 10, dtype=np.float32)
    fused = Fused(2)
    t = fused.add(TABLE["Mul"], fused.input(0), fused.input(1))
    fused.add(TABLE["Relu"], fused.add(TABLE["Add"], t, fused.input(0)))
    before = backend.runtime.launches
    out, = run_elementwise(fused.steps, [xp.asarray(a), xp.asarray(b)], [None])
    assert backend.runtime.launches == before + 1
    np.testing.assert_allclose(out.get(), np.maximum(a * b + a, 0), rtol=1e-6)


def test_arena_views_are_aligned_views_of_one_buffer(backend):
    arena = backend.arena(4096)
    align = backend.alignment
    a = backend.view(arena, 0, (4, 4), np.float32)
    b = backend.view(arena, align, (3,), np.int64)
    assert a.buffer is b.buffer is arena.buffer
    backend.copy_into(a, np.ones((4, 4), np.float32))
    backend.copy_into(b, np.array([1, 2, 3]))
    np.testing.assert_array_equal(backend.to_numpy(b), [1, 2, 3])
    assert backend.to_numpy(a).sum() == 16
    with pytest.raises(BackendError, match="overruns"):
        backend.view(arena, 4096 - 4, (2,), np.float32)


def test_program_cache_reuses_binaries_from_disk(backend, tmp_path, monkeypatch):
    from backends.opencl.program_cache import ProgramCache

    monkeypatch.setenv("PORTABLE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PORTABLE_OPENCL_CACHE", raising=False)
    source = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }"
    first = ProgramCache(backend.runtime.device)
    first.kernel(source, "twice")
    assert first.stats["built"] == 1 and list(tmp_path.rglob("*.bin"))
    second = ProgramCache(backend.runtime.device)
    second.kernel(source, "twice")
    assert second.stats == {"memory": 0, "disk": 1, "built": 0}


def test_build_errors_name_the_device_and_show_the_source(backend):
    with pytest.raises(BackendError, match="(?s)failed to build on .*syntax_error_here"):
        backend.runtime.kernel("__kernel void k() { syntax_error_here }", "k")


def test_missing_kernel_names_op_and_device(backend):
    from backends.opencl import OpenCLBackend

    bare = OpenCLBackend(backend.device, backend.runtime, {})
    with pytest.raises(MissingKernelError, match=r"op Relu has no kernel on device opencl\(0\)"):
        bare.kernel("Relu")


def test_fallback_runs_on_the_cpu_and_reports_it(backend):
    from backends.opencl import OpenCLBackend
    from portable.backend import KernelContext

    allowed = OpenCLBackend(backend.device, backend.runtime, {}, fallback=True)
    x = backend.from_numpy(np.array([-1.0, 2.0], np.float32))
    y = backend.empty((2,), np.float32)
    ctx = KernelContext(allowed.xp, np.random.default_rng(0), allowed)
    allowed.kernel("Relu")(ctx, [x], [y], {})
    np.testing.assert_array_equal(backend.to_numpy(y), [0.0, 2.0])
    report = allowed.fallback_report()
    assert report == {"enabled": True, "ops": {"Relu": 1}, "bytes_copied": 16}
    assert backend.fallback_report()["enabled"] is False


def test_every_declared_op_has_an_opencl_kernel(backend):
    from portable.ops import registry

    missing = sorted(set(registry.ops) - set(backend.kernels))
    assert not missing, f"ops without an OpenCL kernel: {missing}"


def test_float64_is_refused_where_the_device_lacks_it(backend, monkeypatch):
    monkeypatch.setattr(backend.runtime.device, "fp64", False)
    with pytest.raises(BackendError, match="cl_khr_fp64"):
        backend.empty((2,), np.float64)


def test_device_selection_by_name_and_index(monkeypatch):
    from backends.opencl.device import ENV_DEVICE, list_devices, select_device

    pytest.importorskip("pyopencl")
    try:
        found = list_devices()
    except BackendError as exc:
        pytest.skip(str(exc))
    name = found[0][0]
    monkeypatch.setenv(ENV_DEVICE, name.split(":")[-1].strip()[:6].upper())
    assert select_device(0)[0] == name
    monkeypatch.setenv(ENV_DEVICE, "0")
    assert select_device(0)[0] == name
    monkeypatch.setenv(ENV_DEVICE, "no-such-device-xyz")
    with pytest.raises(BackendError, match="no device name contains 'no-such-device-xyz'"):
        select_device(0)
    monkeypatch.delenv(ENV_DEVICE)
    with pytest.raises(BackendError, match=r"opencl\(99\) does not exist"):
        select_device(99)


def test_a_device_whose_compiler_fails_is_refused_when_opened(monkeypatch):
    """A device must build the smallest kernel before it is used (PoCL 3.0 cannot compile
    for a CPU its LLVM 14 does not know): a real compiler error, from a probe that does not
    compile, is reported when the device opens, naming the device and the error."""
    pytest.importorskip("pyopencl")
    from backends.opencl import device as cl_device

    try:
        name = cl_device.list_devices()[0][0]
    except BackendError as exc:
        pytest.skip(str(exc))
    monkeypatch.setattr(cl_device, "PROBE_SOURCE",
                        "__kernel void probe(__global float* x) { x[0] = undeclared_name; }")
    monkeypatch.setattr(cl_device, "_compiles", {})
    with pytest.raises(BackendError) as caught:
        cl_device.CLDevice.open(0)
    message = str(caught.value)
    assert name in message and "cannot compile kernels" in message and "error" in message


def test_missing_pyopencl_names_the_extra():
    code = ("import sys; sys.modules['pyopencl'] = None\n"
            "from backends.opencl import create_backend\n"
            "import portable as pt\n"
            "try:\n    create_backend(pt.opencl(0))\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, timeout=120)
    assert MissingDependencyError.__name__ in out.stdout
    assert "pip install 'portable[opencl]'" in out.stdout


def test_packed_weights_are_reused_only_while_unwritten(backend):
    """Panels packed from an unchanged operand are reused; any write drops them."""
    xp = backend.xp
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    w = rng.standard_normal((7, 9)).astype(np.float32)
    da, dw = xp.asarray(a), xp.asarray(w)
    for _ in range(3):  # the second and later products use the kept panels
        np.testing.assert_allclose((da @ dw).get(), a @ w, rtol=1e-5, atol=1e-5)
    dw *= 2.0  # in place: the kept panels must go
    np.testing.assert_allclose((da @ dw).get(), a @ (2 * w), rtol=1e-5, atol=1e-5)
    dw[1:3] = 0.0  # a write through a view of the same buffer
    w2 = 2 * w
    w2[1:3] = 0
    for _ in range(2):
        np.testing.assert_allclose((da @ dw).get(), a @ w2, rtol=1e-5, atol=1e-5)
