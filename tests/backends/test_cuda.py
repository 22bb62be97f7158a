"""The CUDA backend (CuPy): why it is absent, and, with a GPU, the op table against NumPy.

Without a GPU (or CuPy) the GPU tests are skipped with the probe's reason; the probe's failure
modes, the BackendError of ``cuda(i)`` and ``portable devices`` are tested on any machine with
a stand-in CuPy.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

import backends.cupy as cuda_package
from backends.cupy.device import CudaStatus, probe
from backends.cupy.overrides import REFUSED, refusal
from portable.device import Device, available_devices
from portable.errors import BackendError, MissingKernelError


def fake_cupy(driver=12040, runtime=12080, count=1, count_error=None):
    """A stand-in for ``import cupy`` exposing only what the probe reads."""
    def get_device_count():
        if count_error is not None:
            raise RuntimeError(count_error)
        return count

    runtime_api = types.SimpleNamespace(driverGetVersion=lambda: driver,
                                        runtimeGetVersion=lambda: runtime,
                                        getDeviceCount=get_device_count)
    module = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime_api))
    return lambda name: module


def missing_cupy(name):
    raise ImportError("No module named 'cupy'")


@pytest.mark.parametrize("importer, expected", [
    (missing_cupy, "CuPy is not installed"),
    (fake_cupy(driver=0), "no CUDA driver is installed"),
    (fake_cupy(driver=11020, count_error="cudaErrorInsufficientDriver: CUDA driver version "
               "is insufficient"), "older than CuPy's CUDA runtime (12.8)"),
    (fake_cupy(count_error="cudaErrorNoDevice: no CUDA-capable device is detected"),
     "no CUDA GPU was found"),
    (fake_cupy(count=0), "no CUDA GPU was found"),
])
def test_the_probe_says_why_cuda_is_absent(importer, expected):
    status = probe(importer)
    assert not status.available and expected in status.reason, status.reason


def test_the_probe_names_cuda_visible_devices_when_it_hides_every_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    status = probe(fake_cupy(count=0))
    assert "CUDA_VISIBLE_DEVICES=''" in status.reason


def test_the_probe_reports_a_gpu():
    status = probe(fake_cupy(count=2))
    assert status.available and status.device_count == 2 and status.driver_version == 12040


def test_cuda_raises_a_backend_error_naming_the_reason(monkeypatch):
    monkeypatch.setattr(cuda_package, "probe",
                        lambda: CudaStatus(False, "no CUDA GPU was found (test)"))
    with pytest.raises(BackendError, match=r"CUDA is unavailable: no CUDA GPU was found \(test"):
        Device("cuda", 0).backend
    report = {str(d): text for d, text in available_devices()}
    assert "no CUDA GPU was found (test)" in report["cuda(0)"]


def test_a_device_index_beyond_the_visible_gpus_is_refused(monkeypatch):
    monkeypatch.setattr(cuda_package, "probe", lambda: CudaStatus(True, device_count=1))
    with pytest.raises(BackendError, match=r"cuda\(3\) does not exist: CuPy sees 1"):
        cuda_package.create_backend(Device("cuda", 3))


def test_refused_ops_name_the_op_and_the_reason():
    op = "portable.Custom"
    with pytest.raises(MissingKernelError, match=r"op portable.Custom does not run on CUDA "
                                                 r"\(runs the user's Python forward"):
        refusal(op, REFUSED[op])(None, [], [], {})


def test_portable_devices_lists_cuda(capsys):
    from portable.cli.main import main

    assert main(["devices"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("cuda(0)")]
    assert line and ("unavailable:" in line[0] or "CuPy" in line[0]), line


# -- on a GPU ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cuda():
    status = probe()
    if not status.available:
        pytest.skip(f"no CUDA here: {status.reason}")
    return Device("cuda", 0)


def test_host_copies_round_trip_through_pinned_memory(cuda):
    backend = cuda.backend
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(backend.to_numpy(backend.from_numpy(x)), x)


def test_views_at_offsets_share_the_arena(cuda):
    backend = cuda.backend
    arena = backend.arena(64)
    a = backend.view(arena, 0, (4,), np.float32)
    b = backend.view(arena, 16, (4,), np.float32)
    backend.copy_into(a, np.ones(4, np.float32))
    backend.copy_into(b, np.full(4, 2, np.float32))
    got = backend.to_numpy(backend.view(arena, 0, (8,), np.float32))
    np.testing.assert_array_equal(got, [1, 1, 1, 1, 2, 2, 2, 2])


def test_unsupported_dtypes_are_refused(cuda):
    with pytest.raises(BackendError, match="cannot hold"):
        cuda.backend.empty((2,), np.dtype(object))


def test_the_op_table_matches_numpy_on_cuda(cuda):
    from tests.ops.harness import assert_output_matches, run_ours
    from tests.ops.test_op_table import CASES

    from backends.cupy.overrides import REFUSED as refused

    failures = []
    for case in CASES:
        if case.op in refused:
            continue
        try:
            want = run_ours(case)
            got = run_ours(case, device=cuda)
            for j, (g, w) in enumerate(zip(got, want)):
                case_tol = type(case)(**{**case.__dict__, "rtol": max(case.rtol, 1e-4),
                                         "atol": max(case.atol, 1e-5)})
                assert_output_matches(g, w, case_tol, j)
        except BackendError as exc:
            if "cannot hold" not in str(exc) and "string tensor" not in str(exc):
                failures.append(f"{case.id}: {exc}")
        except Exception as exc:  # collected, so one run reports every failing case
            failures.append(f"{case.id}: {type(exc).__name__}: {str(exc)[:200]}")
    assert not failures, "\n".join(failures)
