"""Shape helpers shared by the op table's type rules and the backends.

They take and return plain tuples and report a failure by their result, so each caller raises
the error of its own layer (a type rule fails through its inference context, naming the node; a
backend raises BackendError).

Example:
    >>> broadcast_shape([(2, 1, 3), (4, 1)])
    (2, 4, 3)
    >>> broadcast_shape([(2, 3), (4,)]) is None
    True
"""
from __future__ import annotations

from typing import Hashable, Sequence


def broadcast_shape(shapes: Sequence[Sequence[Hashable]]) -> tuple | None:
    """The shape ``shapes`` broadcast to (multidirectional, NumPy-style, as ONNX defines it), or
    None when they do not broadcast.

    Args:
        shapes: the shapes, each a sequence of dimensions (ints, or symbolic dimensions that
            compare by equality).

    Returns:
        The broadcast shape as a tuple (``()`` for no shapes), or None on a mismatch.
    """
    # Equal shapes are the common case on the eager elementwise path: answer without the loop.
    if len(shapes) == 1 or all(s == shapes[0] for s in shapes[1:]):
        return tuple(shapes[0]) if shapes else ()
    rank = max(len(s) for s in shapes)
    result: list = [1] * rank
    for shape in shapes:
        for axis, dim in enumerate(shape, start=rank - len(shape)):
            if dim != 1:
                if result[axis] not in (1, dim):
                    return None
                result[axis] = dim
    return tuple(result)
