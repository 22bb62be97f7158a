"""OpenCL under phone-GPU limits: the backend made to behave as if the device had a phone's
caps (``backends.opencl.device.impose_limits``, ``PORTABLE_OPENCL_LIMITS``) still computes the
op table and the light models as NumPy does, keeps every launch and every built kernel within
the caps (checked from CL_KERNEL_LOCAL_MEM_SIZE and the launched work-group sizes), and refuses
float64 with an error naming the op and the dtype.

By default the op table runs one case per op (plus every float16 and float64 case) under the
tightest profile, ``phone-small`` (64 work-items, 16 KB local memory, no float64, GPU launch
shapes and GEMM tiles); ``PORTABLE_OPENCL_SLOW=1`` runs every case. The whole OpenCL suite runs
under a profile with ``PORTABLE_OPENCL_LIMITS=phone pytest tests/backends/opencl``.
"""
import os
import re

import numpy as np
import pytest

import portable as pt
from portable.errors import BackendError
from tests.backends.opencl.conftest import opencl_device
from tests.backends.opencl.test_op_table import (REFUSED, _compare, _expect_refusal, _flat,
                                                 _needs_float64, _refused_or_right)
from tests.ops.harness import run_ours
from tests.ops.test_op_table import CASES

SLOW = os.environ.get("PORTABLE_OPENCL_SLOW") == "1"


def _limited(profile):
    """``opencl(0)`` whose backend runs under ``profile`` until the generator resumes."""
    device = opencl_device()
    with device.backend.limited(profile):
        yield device


@pytest.fixture(scope="module")
def phone_small():
    yield from _limited("phone-small")


@pytest.fixture(scope="module")
def phone():
    yield from _limited("phone")


# -- the profiles themselves ---------------------------------------------------------------------


def test_limits_parse_and_cap_below_the_device():
    pytest.importorskip("pyopencl")
    from backends.opencl.device import CLDevice, impose_limits, parse_limits

    limits = parse_limits("phone,wg=128,local=8k,param=512")
    assert (limits.max_work_group, limits.local_mem, limits.fp64) == (128, 8192, False)
    assert limits.max_parameter == 512 and parse_limits("phone").max_parameter == 1024
    assert parse_limits("") is None and parse_limits("none") is None
    with pytest.raises(BackendError, match="unknown profile 'tablet'"):
        parse_limits("tablet")
    with pytest.raises(BackendError, match="unknown key 'regs'"):
        parse_limits("regs=32")
    try:
        real = CLDevice.open(0)
    except BackendError as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    capped = impose_limits(real, limits)
    assert capped.max_work_group == min(128, real.max_work_group)
    assert capped.local_mem == min(8192, real.local_mem)
    assert capped.max_parameter == min(512, real.max_parameter)
    assert capped.fp64 is False and not capped.is_cpu
    assert "limits phone" in capped.label
    # a cap above the device's own keeps the device's
    assert impose_limits(real, max_work_group=1 << 30).max_work_group == real.max_work_group


def test_float64_sources_are_recognised():
    from backends.opencl.limits import uses_float64

    assert uses_float64("__kernel void k(__global double* x) {}")
    assert uses_float64("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n")
    assert uses_float64("const double4 v = (double4)(0);")
    assert not uses_float64("/* no double here */ __kernel void k(__global float* x) {}")
    assert not uses_float64("// doubles\n__kernel void doubled(__global float* x) {}")


# -- the checks hold and refuse ------------------------------------------------------------------

_LOCAL = """
__kernel void tile(__global float* x) {
  __local float t[4096];                       /* 16 KB */
  const int i = get_global_id(0), l = get_local_id(0);
  t[l] = x[i];
  barrier(CLK_LOCAL_MEM_FENCE);
  x[i] = t[get_local_size(0) - 1 - l];
}
"""


def test_a_kernel_over_the_local_memory_cap_is_refused(phone_small):
    runtime = phone_small.backend.runtime
    with pytest.raises(BackendError, match=r"local memory; .*phone-small.* has 16384") as caught:
        runtime.kernel(_LOCAL.replace("4096", "8192"), "tile")  # 32 KB
    assert "'tile'" in str(caught.value)
    # 16 KB fits, and the kernel reverses each work-group of 64 as written
    kernel = runtime.kernel(_LOCAL, "tile")
    backend = phone_small.backend
    host = np.arange(256, dtype=np.float32)
    x = backend.from_numpy(host)
    runtime.launch1d(kernel, 256, x.buffer)
    runtime.finish()
    want = host.reshape(4, 64)[:, ::-1].ravel()
    np.testing.assert_array_equal(backend.to_numpy(x), want)
    assert runtime.limits.stats["local_mem"] >= 16384


def test_work_groups_over_the_cap_shrink_or_are_refused(phone_small):
    backend = phone_small.backend
    runtime = backend.runtime
    source = """__kernel void fill(const int n, __global float* x) {
      const int i = get_global_id(0) + get_global_id(1) * get_global_size(0);
      if (i < n) x[i] = i; }"""
    kernel = runtime.kernel(source, "fill")
    x = backend.empty((300,), np.float32)
    with pytest.raises(BackendError, match=r"\(16, 16\) \(256 work-items\) exceeds the 64"):
        runtime.launch(kernel, (20, 15), (16, 16), np.int32(300), x.buffer)
    # a 1-D launch of 256 is cut to 64 work-items, and every element is still written
    runtime.launch(kernel, (300,), (256,), np.int32(300), x.buffer)
    runtime.finish()
    np.testing.assert_array_equal(backend.to_numpy(x), np.arange(300, dtype=np.float32))
    assert runtime.limits.stats["shrunk"] >= 1


_ARGUMENTS = """__kernel void axpb(const int n, const float4 ab, __global const float* x,
                                   __global float* y) {
  const int i = get_global_id(0);
  if (i < n) y[i] = ab.x * x[i] + ab.y; }"""


def test_a_kernel_over_the_argument_bytes_cap_is_refused():
    """Its arguments (4 + 16 + two pointers) against CL_DEVICE_MAX_PARAMETER_SIZE, counted
    from the signature at build: one byte under them is refused, naming the kernel and both
    sizes; exactly them builds and computes."""
    device = opencl_device()
    import pyopencl.cltypes as cltypes

    pointers = 2 * device.backend.runtime.device.address_bytes
    needed = 4 + 16 + pointers
    with device.backend.limited(f"phone-small,param={needed - 1}") as backend:
        with pytest.raises(BackendError, match=rf"'axpb' takes {needed} bytes of arguments; "
                                               rf".*allows {needed - 1}"):
            backend.runtime.kernel(_ARGUMENTS, "axpb")
    with device.backend.limited(f"phone-small,param={needed}") as backend:
        runtime = backend.runtime
        kernel = runtime.kernel(_ARGUMENTS, "axpb")
        host = np.arange(100, dtype=np.float32)
        x, y = backend.from_numpy(host), backend.empty((100,), np.float32)
        ab = cltypes.make_float4(2.0, 1.0, 0.0, 0.0)
        runtime.launch1d(kernel, 100, np.int32(100), ab, x.buffer, y.buffer)
        runtime.finish()
        np.testing.assert_array_equal(backend.to_numpy(y), 2 * host + 1)
        assert runtime.limits.stats["parameters"] == needed


def test_a_float64_kernel_is_refused_naming_the_op(phone_small):
    from tests.ops.harness import Case

    case = Case("Cast", [np.ones((2, 3), np.float32)], {"to": 11}, name="limits")
    with pytest.raises(BackendError, match=r"op Cast\b.*float64.*phone-small") as caught:
        run_ours(case, device=phone_small)
    assert "cl_khr_fp64" in str(caught.value)
    # without a float64 output the same op runs
    ok = Case("Cast", [np.full((2, 3), 1.5, np.float32)], {"to": 6}, name="limits32")
    np.testing.assert_array_equal(run_ours(ok, device=phone_small)[0], np.ones((2, 3), np.int32))


def test_integer_binarizer_compares_exactly_without_float64(phone_small):
    """Binarizer on int64 compares in int64 (x >= floor(t) + 1), not in float64: exactly, as
    Python compares an int with a float (NumPy first rounds x to float64 beyond 2**53)."""
    from tests.ops.harness import Case

    x = np.array([[-(2**62), -3, -2, -1, 0, 1, 2, 2**62 + 1]], np.int64)
    for t in (-2.5, -2.0, 0.0, 1.5, 2.0**62, float("nan"), float("inf"), -float("inf")):
        case = Case("ai.onnx.ml.Binarizer", [x], {"threshold": t}, name="int64")
        got = run_ours(case, device=phone_small)[0]
        want = np.array([[int(v) > t for v in x[0]]], np.int64)
        np.testing.assert_array_equal(got, want, err_msg=f"threshold {t}")


# -- the op table and the light models under the caps --------------------------------------------


def _representative(cases):
    """One case per op, every float16 and float64 case (and those named double: float64
    outputs or arithmetic); every case with PORTABLE_OPENCL_SLOW=1."""
    if SLOW:
        return list(cases)
    seen, chosen = set(), []
    for case in cases:
        dtypes = {v.dtype for v in _flat(case.inputs)}
        if case.op not in seen or "double" in case.id or \
                dtypes & {np.dtype(np.float16), np.dtype(np.float64)}:
            seen.add(case.op)
            chosen.append(case)
    return chosen


_TABLE = _representative(CASES)


@pytest.mark.parametrize("case", _TABLE, ids=[c.id for c in _TABLE])
def test_op_table_under_the_tightest_caps(case, phone_small):
    device = phone_small
    if any(v.dtype == object for v in _flat(case.inputs)):
        pytest.skip("string tensors: refused on OpenCL whatever the limits (test_op_table)")
    pt.random.seed(11)
    want = run_ours(case)
    if _needs_float64(case, want):
        message = _refused_or_right(case, device, want)
        if message is not None:
            assert "limits phone-small" in message, message
            if not any(v.dtype == np.float64 for v in _flat(case.inputs)):
                # refused inside the op (not at upload): the error names it
                assert re.search(rf"op {re.escape(case.op)}\b", message), message
        return
    if case.op in REFUSED:
        _expect_refusal(case, lambda: run_ours(case, device=device))
        return
    pt.random.seed(11)
    got = run_ours(case, device=device)
    _compare(got, want, case.id)
    stats = device.backend.runtime.limits.stats
    assert stats["work_group"] <= 64 and stats["local_mem"] <= 16384, stats
    assert stats["parameters"] <= 1024, stats


@pytest.mark.parametrize("name", ["resnet50", "shufflenet"] + (
    ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "squeezenet", "vgg19",
     "zfnet512"]
    if SLOW else []))
def test_light_model_under_phone_caps(phone, name):
    from tests.backends.opencl import test_models

    test_models.test_light_model_matches_numpy_in_every_value(phone, name)
    stats = phone.backend.runtime.limits.stats
    assert 0 < stats["work_group"] <= 256 and stats["local_mem"] <= 32768, stats
    assert 0 < stats["parameters"] <= 1024, stats
