"""Writing a command's outputs: an ``.npz`` of arrays by name, atomically, never over an input.

``portable predict m.onnx --inputs x.npz --outputs m.onnx`` used to replace the model with its
own outputs. Outputs are refused, before anything runs, when their path is one of the
command's inputs (the same file, however it is spelled or linked) or a folder.

Example:
    >>> check_output_path("out.npz", ["model.onnx", "x.npz"])   # doctest: +SKIP
"""
from __future__ import annotations

import io
import os
from typing import Iterable, Mapping

import numpy as np

from portable.errors import PortableError
from portable.io.atomic import atomic_write_bytes


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare where they would be
        return os.path.realpath(a) == os.path.realpath(b)


def check_output_path(path: str, inputs: Iterable[str | None]) -> None:
    """Refuse ``path`` as an output when it is a folder or one of ``inputs``.

    Raises:
        PortableError: naming the path and the input it would replace.
    """
    if os.path.isdir(path):
        raise PortableError(f"--outputs {path} is a folder; give a file name such as "
                            f"{os.path.join(path, 'outputs.npz')}")
    for source in inputs:
        if source and _same_file(path, source):
            raise PortableError(f"--outputs {path} is the input {source}: writing the outputs "
                                f"there would replace it; choose another file")


def save_outputs(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` as an ``.npz`` file, atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())
