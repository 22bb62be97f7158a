"""Nested lists of leaves (NDArrays, Symbols) as one flat list and a format that rebuilds them:
what MXNet's control flow (``nd.contrib`` and ``sym.contrib`` foreach, while_loop, cond) takes
and returns.

Example:
    >>> flat, fmt = flatten([1, [2, 3]], int, "x")
    >>> flat, regroup(flat, fmt)[0]
    ([1, 2, 3], [1, [2, 3]])
"""
from __future__ import annotations

from typing import Any, Callable

from portable.errors import PortableError


def flatten(args: Any, leaf: type, what: str, check: Callable[[Any, str], None] | None = None,
            error: type[PortableError] = PortableError) -> tuple[list, Any]:
    """``args`` (a leaf or nested lists and tuples of leaves) -> (flat list, format); the
    format of a bare leaf is 0. ``check(leaf, what)`` may refuse a leaf; anything else raises ``error``
    naming ``what``."""
    if isinstance(args, leaf):
        if check is not None:
            check(args, what)
        return [args], 0
    if not isinstance(args, (list, tuple)):
        raise error(f"{what} must be a {leaf.__name__} or a (nested) list of them, got "
                    f"{type(args).__name__}")
    flat, formats = [], []
    for item in args:
        part, fmt = flatten(item, leaf, what, check, error)
        flat.extend(part)
        formats.append(fmt)
    return flat, formats


def regroup(flat: list, fmt: Any) -> tuple[Any, list]:
    """The structure ``fmt`` rebuilt from the front of ``flat``, and the rest of ``flat``."""
    if isinstance(fmt, int):
        return flat[0], flat[1:]
    out = []
    for part in fmt:
        item, flat = regroup(flat, part)
        out.append(item)
    return out, flat
