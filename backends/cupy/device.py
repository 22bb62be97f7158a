"""Whether CUDA can be used here, and if not, why: the probe behind ``cuda(i)`` and
``portable devices``.

The probe imports CuPy, asks the CUDA driver for its version and the runtime for the device
count, and turns each failure into one sentence: CuPy missing, no driver (or one too old for
CuPy's CUDA runtime), no GPU. Device numbering and ``CUDA_VISIBLE_DEVICES`` are CUDA's own:
``cuda(i)`` is the i-th visible device. Nothing is cached, so a test can probe again with
another (mocked) CuPy.

Example:
    >>> from backends.cupy.device import probe
    >>> status = probe()
    >>> status.available or bool(status.reason)
    True
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Callable

INSTALL_HINT = "pip install 'portable[cuda]' (cupy-cuda12x)"


@dataclass(frozen=True)
class CudaStatus:
    """The probe's answer: ``available`` with ``device_count`` devices, else ``reason``."""

    available: bool
    reason: str = ""
    device_count: int = 0
    driver_version: int = 0
    runtime_version: int = 0
    visible: str | None = None


def _version(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}" if number else "none"


def probe(import_module: Callable[[str], Any] = importlib.import_module) -> CudaStatus:
    """Probe CUDA through CuPy.

    Args:
        import_module: how CuPy is imported (tests pass a stand-in).

    Returns:
        A CudaStatus; never raises.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        cupy = import_module("cupy")
    except ImportError as exc:
        return CudaStatus(False, f"CuPy is not installed ({exc}); {INSTALL_HINT}",
                          visible=visible)
    except Exception as exc:  # a broken install (missing CUDA libraries) fails on import
        return CudaStatus(False, f"CuPy cannot be imported ({type(exc).__name__}: {exc})",
                          visible=visible)
    runtime = cupy.cuda.runtime
    try:
        driver = int(runtime.driverGetVersion())
    except Exception as exc:
        return CudaStatus(False, f"no CUDA driver could be queried ({exc})", visible=visible)
    try:
        built_for = int(runtime.runtimeGetVersion())
    except Exception:
        built_for = 0
    if driver == 0:
        return CudaStatus(False, "no CUDA driver is installed (libcuda not found): install "
                          "the NVIDIA driver", visible=visible)
    try:
        count = int(runtime.getDeviceCount())
    except Exception as exc:
        text = str(exc)
        # (by the error's name: CUDA's minor-version compatibility lets an older 12.x driver
        # run a newer 12.x runtime, so comparing versions alone would misreport)
        if "InsufficientDriver" in text:
            reason = (f"the CUDA driver ({_version(driver)}) is older than CuPy's CUDA "
                      f"runtime ({_version(built_for)}): update the driver or install the "
                      f"CuPy build for your CUDA ({text})")
        elif "NoDevice" in text:
            reason = f"no CUDA GPU was found ({text})"
        else:
            reason = f"the CUDA runtime failed to count devices ({text})"
        return CudaStatus(False, reason, driver_version=driver, runtime_version=built_for,
                          visible=visible)
    if count == 0:
        hidden = (f" (CUDA_VISIBLE_DEVICES={visible!r} hides them?)" if visible is not None
                  else "")
        return CudaStatus(False, f"no CUDA GPU was found{hidden}", driver_version=driver,
                          runtime_version=built_for, visible=visible)
    return CudaStatus(True, device_count=count, driver_version=driver,
                      runtime_version=built_for, visible=visible)
