"""Built OpenCL programs, kept per device in memory and on disk between runs.

A program is keyed by the SHA-256 of its source, its build options and the device identity
(platform, device and driver versions), so a driver update or another device never loads a
stale binary. Binaries live in ``$PORTABLE_CACHE_DIR/opencl`` (default
``$XDG_CACHE_HOME/portable/opencl``, i.e. ``~/.cache/portable/opencl``); a binary that fails to
load is rebuilt from source and replaced. ``PORTABLE_OPENCL_CACHE=0`` disables the disk cache.

Example:
    >>> cache = ProgramCache(device)                        # doctest: +SKIP
    >>> kernel = cache.kernel(source, "axpy", ("-DT=float",))  # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from portable.cache_dirs import cache_dir
from portable.errors import BackendError
from portable.io.atomic import atomic_write_bytes

# Options every program gets: contraction of a*b+c into FMA, as BLAS and NumPy's own loops do.
BASE_OPTIONS = ("-cl-mad-enable",)


def cache_root() -> Path | None:
    """The directory of cached binaries, or None when the disk cache is disabled."""
    if os.environ.get("PORTABLE_OPENCL_CACHE", "1") == "0":
        return None
    return cache_dir("opencl")


def _scalar_dtypes() -> dict[str, Any]:
    import numpy as np
    import pyopencl.cltypes as cltypes

    table = {"char": np.int8, "uchar": np.uint8, "short": np.int16, "ushort": np.uint16,
             "int": np.int32, "uint": np.uint32, "long": np.int64, "ulong": np.uint64,
             "float": np.float32, "double": np.float64}
    for base in ("int", "float"):
        for width in (2, 4, 8, 16):
            table[f"{base}{width}"] = getattr(cltypes, f"{base}{width}")
    return table


def argument_dtypes(source: str, name: str) -> list:
    """Per argument of kernel ``name`` in ``source``: None for a pointer, else its dtype."""
    match = re.search(rf"__kernel\s+void\s+{re.escape(name)}\s*\(([^)]*)\)", source)
    if match is None:
        raise BackendError(f"kernel {name!r} is not defined in its program source")
    table = _scalar_dtypes()
    dtypes = []
    for param in match.group(1).split(","):
        if "*" in param:
            dtypes.append(None)
            continue
        words = [w for w in param.split() if w not in ("const", "__private")]
        if words[0] not in table:
            raise BackendError(f"kernel {name!r}: argument type {words[0]!r} is not supported")
        dtypes.append(table[words[0]])
    return dtypes


class ProgramCache:
    """Programs and kernels built for one device.

    Attributes:
        stats: counts of ``memory`` hits, ``disk`` hits and ``built`` programs.
    """

    def __init__(self, device: Any, vet: Callable[[str, str], None] | None = None,
                 check: Callable[[Any, str, list], None] | None = None) -> None:
        self.device = device
        # Hooks the runtime sets: ``vet(source, name)`` before a kernel is first built
        # (refuses what the device cannot run), ``check(kernel, name, arguments)`` after (its
        # resources; ``arguments``: per argument None for a pointer, else its dtype).
        self.vet, self.check = vet, check
        self._programs: dict[str, Any] = {}
        self._kernels: dict[tuple[str, str], Any] = {}
        self._by_text: dict[tuple[str, str, tuple], Any] = {}  # (source, name, options)
        self._lock = threading.Lock()
        self.stats = {"memory": 0, "disk": 0, "built": 0}
        root = cache_root()
        tag = hashlib.sha256(device.identity.encode()).hexdigest()[:16]
        self.directory = None if root is None else root / tag

    def key(self, source: str, options: Sequence[str]) -> str:
        text = "\0".join([self.device.identity, " ".join(options), source])
        return hashlib.sha256(text.encode()).hexdigest()

    def program(self, source: str, options: Sequence[str] = ()) -> Any:
        """The built program of ``source`` (from memory, disk, or a fresh build)."""
        options = tuple(BASE_OPTIONS) + tuple(options)
        key = self.key(source, options)
        with self._lock:
            program = self._programs.get(key)
            if program is not None:
                self.stats["memory"] += 1
                return program
            program = self._load(key, options) or self._build(key, source, options)
            self._programs[key] = program
            return program

    def kernel(self, source: str, name: str, options: Sequence[str] = ()) -> Any:
        """Kernel ``name`` of the program; one Kernel object per (program, name), reused.

        Its scalar argument types are declared from the source's signature: pyopencl then
        packs arguments in a generated invoker (a few microseconds per launch) instead of
        inspecting each one (hundreds of microseconds for vector arguments)."""
        import pyopencl as cl

        options = tuple(options)
        kernel = self._by_text.get((source, name, options))  # (no digest of the source)
        if kernel is not None:
            return kernel
        key = (self.key(source, options), name)
        kernel = self._kernels.get(key)
        if kernel is None:
            if self.vet is not None:
                self.vet(source, name)
            kernel = cl.Kernel(self.program(source, options), name)
            arguments = argument_dtypes(source, name)
            kernel.set_scalar_arg_dtypes(arguments)
            kernel.arg_dtypes = arguments  # (for clones: ``launch.Launch`` keeps its own)
            if self.check is not None:
                self.check(kernel, name, arguments)
            self._kernels[key] = kernel
        self._by_text[(source, name, options)] = kernel
        return kernel

    def _path(self, key: str) -> Path | None:
        return None if self.directory is None else self.directory / f"{key}.bin"

    def _load(self, key: str, options: tuple[str, ...]) -> Any:
        import pyopencl as cl

        path = self._path(key)
        if path is None or not path.exists():
            return None
        try:
            binary = path.read_bytes()
            program = cl.Program(self.device.context, [self.device.device], [binary])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                program.build(options=list(options))
        except (OSError, cl.Error):
            return None  # unreadable or stale: rebuilt from source below
        self.stats["disk"] += 1
        return program

    def _build(self, key: str, source: str, options: tuple[str, ...]) -> Any:
        import pyopencl as cl

        program = cl.Program(self.device.context, source)
        try:
            with warnings.catch_warnings():  # compiler remarks are not the user's concern
                warnings.simplefilter("ignore", cl.CompilerWarning)
                program.build(options=list(options), devices=[self.device.device],
                              cache_dir=False)
        except cl.Error as exc:
            head = "\n".join(f"{i + 1:4d} {line}" for i, line in
                             enumerate(source.splitlines()[:400]))
            raise BackendError(f"OpenCL program failed to build on {self.device.name} "
                               f"(options {' '.join(options)}): {exc}\n{head}") from exc
        self.stats["built"] += 1
        path = self._path(key)
        if path is not None:
            try:
                binary = program.get_info(cl.program_info.BINARIES)[0]
                if binary:
                    atomic_write_bytes(path, bytes(binary))
            except (OSError, cl.Error):
                pass  # a read-only cache directory only costs rebuilds
        return program
