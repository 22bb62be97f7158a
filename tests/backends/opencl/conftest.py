"""Shared fixtures of the OpenCL backend tests: the device, or a skip saying why there is none.

PoCL compiles kernels slowly the first time; compiled programs are cached on disk
(``~/.cache/portable/opencl`` and PoCL's own cache), so later runs are much faster.
"""
import pytest


def opencl_device():
    """``portable.opencl(0)`` with its backend loaded, or skip with the reason."""
    pytest.importorskip("pyopencl", reason="pyopencl is not installed (pip install "
                                           "'portable[opencl]')")
    import portable as pt
    from portable.errors import BackendError

    try:
        device = pt.opencl(0)
        device.backend
    except BackendError as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    return device


@pytest.fixture(scope="session")
def device():
    return opencl_device()


@pytest.fixture(scope="session")
def backend(device):
    return device.backend


@pytest.fixture(scope="session")
def fp64(backend):
    """Skip a test that needs float64 on a device without cl_khr_fp64."""
    if not backend.runtime.device.fp64:
        pytest.skip(f"{backend.runtime.device.name} has no float64 (cl_khr_fp64)")
    return True
