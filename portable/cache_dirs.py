"""Where portable keeps what it builds once per machine: ``$PORTABLE_CACHE_DIR/<kind>``
(default ``$XDG_CACHE_HOME/portable/<kind>``, i.e. ``~/.cache/portable/<kind>``): OpenCL
binaries (``backends/opencl/program_cache.py``) and the compiled CPU loops
(``backends/numpy/jit``).

Example:
    >>> cache_dir("opencl").name
    'opencl'
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir(kind: str) -> Path:
    """The folder of one kind of cached build (not created here)."""
    base = os.environ.get("PORTABLE_CACHE_DIR")
    if base is None:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "portable")
    return Path(base) / kind
