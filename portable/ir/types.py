"""Value types besides tensors: sequences and optionals (ONNX ``sequence_type`` and
``optional_type``).

A sequence's value is a Python list of backend arrays (each of the element type, though their
shapes may differ); an optional's value is None (empty) or its element's value (an array, or a
list for an optional sequence). Neither is ever placed in a memory plan: the ops that make them
are ``dynamic_outputs`` ops, which return the values they make (``portable/backend.py``), and
the planner, the executor and feeds leave any value whose type is not a TensorType unplanned
(``is_tensor``).

Example:
    >>> from portable.ir import SequenceType, OptionalType, TensorType
    >>> SequenceType(TensorType((None, 3), "float32"))
    seq(float32[?x3])
    >>> OptionalType(SequenceType(dtype="int64", length=0))
    optional(seq(int64[*], len=0))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from portable.ir.graph import TensorType


@dataclass(frozen=True, init=False)
class SequenceType:
    """A sequence of tensors.

    Args:
        elem: the type every element has: its dims are None where elements differ or are
            unknown; None when even the rank is unknown (an empty sequence's elements, or
            elements of different ranks).
        dtype: the elements' dtype when ``elem`` is None (taken from ``elem`` otherwise);
            None when unknown.
        length: the number of elements when known while planning (SequenceEmpty: 0), else
            None. An empty sequence's ``elem`` says nothing: inserting a tensor into it gives
            that tensor's type (``join``).
    """

    elem: TensorType | None
    dtype: np.dtype | None
    length: int | None

    def __init__(self, elem: TensorType | None = None, dtype: Any = None,
                 length: int | None = None) -> None:
        if elem is not None and not isinstance(elem, TensorType):
            raise TypeError(f"a sequence holds tensors, not {elem!r}")
        if elem is not None:
            dtype = elem.dtype
        object.__setattr__(self, "elem", elem)
        object.__setattr__(self, "dtype", None if dtype is None else np.dtype(dtype))
        object.__setattr__(self, "length", None if length is None else int(length))

    @property
    def is_static(self) -> bool:
        """Never: a sequence's elements are known only when it runs, and a memory plan never
        holds one."""
        return False

    def __repr__(self) -> str:
        if self.elem is not None:
            elem = repr(self.elem)
        else:
            elem = f"{'?' if self.dtype is None else self.dtype.name}[*]"
        return f"seq({elem}{'' if self.length is None else f', len={self.length}'})"


@dataclass(frozen=True)
class OptionalType:
    """An optional value: empty (None) or a value of ``elem``, a TensorType or SequenceType."""

    elem: TensorType | SequenceType

    def __post_init__(self) -> None:
        if not isinstance(self.elem, (TensorType, SequenceType)):
            raise TypeError(f"an optional holds a tensor or a sequence, not {self.elem!r}")

    @property
    def is_static(self) -> bool:
        """Never: whether it holds a value is known only when it runs."""
        return False

    @property
    def dtype(self) -> np.dtype | None:
        return self.elem.dtype

    def __repr__(self) -> str:
        return f"optional({self.elem!r})"


ValueType = Union[TensorType, SequenceType, OptionalType]


def is_tensor(type_: Any) -> bool:
    """Whether a value of ``type_`` is a tensor (planned, fed and returned as an array)."""
    return isinstance(type_, TensorType)


def merge_elem(a: TensorType | None, b: TensorType | None) -> TensorType | None:
    """The element type of a sequence holding elements of types ``a`` and ``b``: dims they
    disagree on become None; None when their ranks differ or either is unknown."""
    if a is None or b is None or a.rank != b.rank or a.dtype != b.dtype:
        return None
    return TensorType([x if x == y else None for x, y in zip(a.shape, b.shape)], a.dtype)


def join(a: ValueType | None, b: ValueType | None) -> ValueType | None:
    """The most precise type that holds every value of ``a`` and of ``b`` (If's branches, a
    Loop's carried value from one iteration to the next); None when no one type does (a
    tensor and a sequence, different dtypes or ranks). An empty sequence joins any sequence
    of its dtype; tensor dims that differ become None.

    Example:
        >>> join(SequenceType(dtype="float32", length=0),
        ...      SequenceType(TensorType((2,), "float32"), length=1))
        seq(float32[2])
    """
    if a is None or b is None:
        return None
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        return merge_elem(a, b)
    if isinstance(a, OptionalType) and isinstance(b, OptionalType):
        elem = join(a.elem, b.elem)
        return None if elem is None else OptionalType(elem)
    if isinstance(a, SequenceType) and isinstance(b, SequenceType):
        if a.dtype is not None and b.dtype is not None and a.dtype != b.dtype:
            return None
        length = a.length if a.length == b.length else None
        if a.length == 0 or b.length == 0:
            full = b if a.length == 0 else a
            return SequenceType(full.elem, full.dtype if full.dtype is not None else
                                (a.dtype or b.dtype), length)
        dtype = a.dtype if a.dtype is not None else b.dtype
        return SequenceType(merge_elem(a.elem, b.elem), dtype, length)
    return None


def type_of_value(value: Any) -> ValueType | None:
    """The type of a run-time value: an array (anything with shape and dtype), a list of
    arrays (a sequence) or None (an empty optional, typed None: its element is unknown)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        elem: TensorType | None = None
        for i, item in enumerate(value):
            item_type = TensorType(item.shape, item.dtype)
            elem = item_type if i == 0 else merge_elem(elem, item_type)
        dtype = value[0].dtype if value else None
        return SequenceType(elem, dtype, len(value))
    return TensorType(value.shape, value.dtype)
