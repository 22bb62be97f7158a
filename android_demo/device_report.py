"""What this device offers and what portable will use on it.

Reports Python, NumPy and the BLAS it was built with, the CPUs, the memory (``/proc/meminfo``),
the OpenCL platforms and devices with their memory and compute units (through pyopencl, or how
to get it), the devices portable can use (``portable devices``) and the device the digits demo
picks. Needs only NumPy; never fails because something is missing, it says so instead.

    $ python android_demo/device_report.py
    $ python android_demo/device_report.py --json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # classify_digits, beside this file
if importlib.util.find_spec("portable") is None:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parent))

from classify_digits import DEFAULT_DEVICE, pick_device  # noqa: E402
import portable  # noqa: E402
from portable.sizes import format_bytes  # noqa: E402

OPENCL_HELP = ("on Android (Termux): pkg install opencl-vendor-driver clinfo, then pip install "
               "pyopencl (or pkg install python-pyopencl where packaged); on a PC: pip install "
               "'portable[opencl]' (PoCL on the CPU) or your GPU vendor's driver")
MEMINFO_KEYS = ("MemTotal", "MemAvailable", "SwapTotal", "SwapFree")


def _android_property(name: str) -> str | None:
    """An Android system property (``getprop``), or None off Android."""
    getprop = shutil.which("getprop")
    if getprop is None:
        return None
    try:
        out = subprocess.run([getprop, name], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def system_info() -> dict[str, Any]:
    """Python, OS, CPU model and count, and the device model on Android."""
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Hardware", "Processor") and value.strip():
                cpu_model = value.strip()  # phones name the SoC in "Hardware", last
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
            "os": platform.platform(), "machine": platform.machine(),
            "android_model": _android_property("ro.product.model"),
            "android_release": _android_property("ro.build.version.release"),
            "cpu_model": cpu_model, "cpu_count": os.cpu_count(), "cpus_usable": usable}


def numpy_info() -> dict[str, Any]:
    """NumPy's version and the BLAS it was built with (name, version, configuration)."""
    info: dict[str, Any] = {"version": np.__version__, "blas": None}
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        info["blas"] = {k: blas.get(k) for k in ("name", "version", "openblas configuration")
                        if blas.get(k)}
    except Exception:  # older NumPy or a build without the config: report what we know
        pass
    threads = {k: os.environ[k] for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
               if k in os.environ}
    info["thread_settings"] = threads
    return info


def memory_info() -> dict[str, int]:
    """``/proc/meminfo``'s totals in bytes (empty where it does not exist)."""
    found = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in MEMINFO_KEYS:
                found[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return found


def opencl_info() -> dict[str, Any]:
    """OpenCL devices in portable's order (``opencl(i)`` is entry ``i``), or why there are
    none and how to get them."""
    try:
        import pyopencl as cl

        from backends.opencl.device import check_compiler, list_devices

        found = list_devices()
    except ImportError as exc:
        return {"available": False, "reason": f"pyopencl is not importable ({exc})",
                "how_to_get_it": OPENCL_HELP}
    except Exception as exc:  # no platform, or the ICD loader fails
        return {"available": False, "reason": str(exc), "how_to_get_it": OPENCL_HELP}
    devices, refusals = [], []
    for index, (name, device) in enumerate(found):
        refusal = ""
        try:  # (a device whose compiler cannot build a kernel is no device portable uses)
            check_compiler(cl.Context([device]), device, name)
        except Exception as exc:  # noqa: BLE001 - BackendError, or the driver failing
            refusal = str(exc)
            refusals.append(refusal)
        extensions = device.extensions.split()
        devices.append({
            "index": index, "name": name, "version": device.version.strip(),
            "driver": device.driver_version.strip(),
            "type": _cl_type(device.type), "compute_units": int(device.max_compute_units),
            "global_memory_bytes": int(device.global_mem_size),
            "max_allocation_bytes": int(device.max_mem_alloc_size),
            "local_memory_bytes": int(device.local_mem_size),
            "max_work_group_size": int(device.max_work_group_size),
            "fp16": "cl_khr_fp16" in extensions, "fp64": "cl_khr_fp64" in extensions,
            "compiles": not refusal})
    if len(refusals) == len(devices):
        return {"available": False, "reason": refusals[0], "how_to_get_it": OPENCL_HELP,
                "devices": devices}
    return {"available": True, "devices": devices}


def _cl_type(bits: int) -> str:
    import pyopencl as cl

    names = [n for n in ("GPU", "CPU", "ACCELERATOR") if bits & getattr(cl.device_type, n)]
    return "+".join(names) or "OTHER"


def portable_info() -> dict[str, Any]:
    """Every device type portable knows with its description or why it is unavailable
    (``portable devices``), and what the demo runs on by default and with ``--device auto``."""
    from portable.device import available_devices

    return {"version": portable.__version__,
            "devices": {str(d): text for d, text in available_devices()},
            "demo_device": {"default": DEFAULT_DEVICE, "auto": pick_device("auto")}}


def report() -> dict[str, Any]:
    return {"system": system_info(), "numpy": numpy_info(), "memory": memory_info(),
            "opencl": opencl_info(), "portable": portable_info()}


def _print(data: dict[str, Any]) -> None:
    system, numpy_, memory = data["system"], data["numpy"], data["memory"]
    device = " ".join(filter(None, (system["android_model"],
                                    system["android_release"] and
                                    f"(Android {system['android_release']})")))
    print(f"device:   {device or system['os']} [{system['machine']}]")
    print(f"cpu:      {system['cpu_model'] or 'unknown'}, {system['cpu_count']} cores"
          + (f" ({system['cpus_usable']} usable)" if system["cpus_usable"] else ""))
    print("memory:   " + (", ".join(f"{k} {format_bytes(v)}" for k, v in memory.items())
                          or "unknown (/proc/meminfo not readable)"))
    print(f"python:   {system['implementation']} {system['python']}")
    blas = numpy_["blas"] or {}
    print(f"numpy:    {numpy_['version']}, BLAS {blas.get('name', 'unknown')} "
          f"{blas.get('version', '')}".rstrip())
    cl = data["opencl"]
    if cl["available"]:
        for d in cl["devices"]:
            print(f"opencl({d['index']}): {d['name']} [{d['type']}], {d['version']}, "
                  f"{d['compute_units']} compute units, {format_bytes(d['global_memory_bytes'])}"
                  f" (max allocation {format_bytes(d['max_allocation_bytes'])}), fp16 "
                  f"{'yes' if d['fp16'] else 'no'}, fp64 {'yes' if d['fp64'] else 'no'}")
    else:
        print(f"opencl:   none: {cl['reason']}\n          to get it: {cl['how_to_get_it']}")
    print(f"portable {data['portable']['version']} devices:")
    for name, text in data["portable"]["devices"].items():
        print(f"  {name:<10} {text}")
    pick = data["portable"]["demo_device"]
    print(f"demo:     runs on {pick['default']} by default; --device auto picks {pick['auto']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    data = report()
    if args.json:
        print(json.dumps(data))
    else:
        _print(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
