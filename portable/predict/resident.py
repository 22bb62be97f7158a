"""The peak resident memory of this process, as the kernel counts it: what a phone's
low-memory killer looks at, and what the prediction-memory benchmark compares; and the memory
the process may have at all (``machine_bytes``), the limit when no budget is given.

Example:
    >>> nbytes, source = peak_resident_bytes()
    >>> source in ("VmHWM", "getrusage", "unavailable")
    True
"""
from __future__ import annotations

import os
import sys


def peak_resident_bytes() -> tuple[int | None, str]:
    """The process's peak resident set in bytes and where it was read.

    ``VmHWM`` from ``/proc/self/status`` (Linux, Android), else ``getrusage``'s ``ru_maxrss``
    (KiB on Linux, bytes on macOS), else ``(None, "unavailable")``.

    Example:
        >>> nbytes, source = peak_resident_bytes()
        >>> source in ("VmHWM", "getrusage", "unavailable")
        True
    """
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024, "VmHWM"
    except OSError:
        pass
    try:
        import resource
    except ImportError:  # Windows
        return None, "unavailable"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (peak if sys.platform == "darwin" else peak * 1024), "getrusage"


def reset_peak_resident() -> bool:
    """Make the peak start again from the current resident set (Linux ``clear_refs``);
    False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def machine_bytes() -> int:
    """Physical memory, or what the process's address-space limit leaves it when that is
    lower (the limit less the address space already mapped)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: assume a small one
        total = 4 << 30
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return total
    if soft == resource.RLIM_INFINITY:
        return total
    return max(min(total, soft - _mapped_bytes()), 0)


def _mapped_bytes() -> int:
    """The address space this process has mapped (Linux ``VmSize``; 0 where unknown)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
