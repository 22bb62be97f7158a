"""Named tensors on disk: safetensors files written atomically (no pickle).

``save_arrays`` writes a name -> array mapping; ``load_arrays`` reads one back and turns every
way a file can be unreadable (missing, truncated, not safetensors, bad header) into a
SerializationError that names the file. safetensors is imported inside the functions, so
``import portable`` never loads it.

Example:
    >>> save_arrays("/tmp/w.params", {"w": np.ones(2, np.float32)})   # doctest: +SKIP
    >>> load_arrays("/tmp/w.params")["w"]                               # doctest: +SKIP
    array([1., 1.], dtype=float32)
"""
from __future__ import annotations

import os
from typing import Mapping

import numpy as np

from portable.errors import MissingDependencyError, SerializationError
from portable.io.atomic import atomic_path

FORMAT = "portable.gluon.parameters"


def _safetensors():
    try:
        import safetensors.numpy as st
    except ImportError as exc:
        raise MissingDependencyError(f"saving and loading parameters needs safetensors "
                                     f"({exc}); install it with: pip install safetensors"
                                     ) from exc
    return st


def save_arrays(path: str | os.PathLike, arrays: Mapping[str, np.ndarray],
                metadata: Mapping[str, str] | None = None) -> None:
    """Write ``arrays`` to ``path`` as safetensors, atomically.

    Args:
        path: the target file (its folder is created).
        arrays: name -> host array.
        metadata: extra string -> string entries for the header.
    """
    st = _safetensors()
    tensors = {str(name): np.ascontiguousarray(value) for name, value in arrays.items()}
    header = {"format": FORMAT, **(metadata or {})}
    try:
        with atomic_path(path) as tmp:  # written piece by piece, not built in memory
            st.save_file(tensors, tmp, metadata=header)
    except Exception as exc:  # e.g. an object or unsupported dtype
        raise SerializationError(f"cannot write parameters to {path}: {exc}") from exc


def load_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a safetensors file into name -> writable host arrays.

    Raises:
        SerializationError: naming the file when it is missing, truncated or not safetensors.
    """
    st = _safetensors()
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise SerializationError(f"cannot read parameter file {path}: {exc}") from exc
    try:
        loaded = st.load(raw)
    except Exception as exc:  # SafetensorError, or a header that is not valid JSON
        raise SerializationError(f"parameter file {path} is corrupted or not a safetensors "
                                 f"file ({len(raw)} bytes): {exc}") from exc
    return {name: np.array(value, copy=True) for name, value in loaded.items()}
