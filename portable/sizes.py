"""Byte sizes as people write them: ``parse_size("64MB")`` and ``format_bytes(3 << 20)``.

Units follow what memory budgets mean on devices: ``k``/``KB``/``KiB`` are all 1024 bytes,
``M``/``MB``/``MiB`` 1024**2 and so on (a phone's "2 GB" of RAM is 2 GiB).

Example:
    >>> parse_size("1.5GiB")
    1610612736
    >>> format_bytes(3 * 2**20 + 2**19)
    '3.5 MiB'
"""
from __future__ import annotations

import math
import re

from portable.errors import PortableError

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
# Larger than any memory a budget could mean (an exbibyte), and still exact as an int64.
MAX_BYTES = 1 << 60
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]?)(i?b)?\s*$", re.I)


def parse_size(value: int | float | str) -> int:
    """Bytes in ``value``: a number (bytes) or a string such as ``"64MB"``, ``"512k"``,
    ``"1.5GiB"``. Raises PortableError naming the value when it is not a size."""
    if isinstance(value, bool):
        raise PortableError(f"not a byte size: {value!r}")
    if isinstance(value, (int, float)):
        nbytes = value
    else:
        match = _PATTERN.match(str(value))
        if match is None:
            raise PortableError(f"not a byte size: {value!r} (write e.g. 64MB, 512k, 1.5GiB)")
        number, prefix, _ = match.groups()
        nbytes = float(number) * _UNITS[prefix.lower()]
    if nbytes != nbytes or nbytes < 0:
        raise PortableError(f"a byte size must be positive, got {value!r}")
    if not math.isfinite(nbytes) or nbytes > MAX_BYTES:
        raise PortableError(f"a byte size must be at most {MAX_BYTES} bytes (1 EiB), "
                            f"got {value!r}")
    return int(nbytes)


def format_bytes(nbytes: int | float) -> str:
    """``nbytes`` with a binary unit and 1 decimal (``'3.5 MiB'``; bytes under 1 KiB exact)."""
    nbytes = float(nbytes)
    if abs(nbytes) < 1024:
        return f"{int(nbytes)} B"
    for unit in ("KiB", "MiB", "GiB"):
        nbytes /= 1024
        if abs(nbytes) < 1024:
            return f"{nbytes:.1f} {unit}"
    return f"{nbytes / 1024:.1f} TiB"
