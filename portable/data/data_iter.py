"""The base of MXNet 1.x's data iterators: ``DataDesc`` (name, shape, dtype, layout of one
input), ``DataBatch`` (one batch) and ``DataIter`` (the iterator protocol), as ``mx.io`` has
them. The iterators themselves are in ``portable.data.iterators``.

Example:
    >>> DataDesc("data", (32, 784))
    DataDesc[data,(32, 784),<class 'numpy.float32'>,NCHW]
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any, Iterator, Sequence

import numpy as np

from portable.errors import PortableError
from portable.ndarray.ndarray import NDArray

__all__ = ["DataBatch", "DataDesc", "DataIter"]


class DataDesc(namedtuple("DataDesc", ["name", "shape"])):
    """Name, shape, dtype and layout of one input (a tuple ``(name, shape)`` with two more
    attributes), as MXNet's ``mx.io.DataDesc``.

    Example:
        >>> DataDesc("data", (32, 784)).dtype
        <class 'numpy.float32'>
    """

    def __new__(cls, name: str, shape: Sequence[int], dtype: Any = np.float32,
                layout: str = "NCHW") -> "DataDesc":
        desc = super().__new__(cls, name, shape)
        desc.dtype = dtype
        desc.layout = layout
        return desc

    def __repr__(self) -> str:
        return f"DataDesc[{self.name},{self.shape},{self.dtype},{self.layout}]"

    @staticmethod
    def get_batch_axis(layout: str | None) -> int:
        """The axis of ``layout`` holding the batch (``'N'``); 0 without a layout."""
        return 0 if layout is None else layout.find("N")

    @staticmethod
    def get_list(shapes: Sequence[tuple], types: Sequence[tuple] | None) -> list["DataDesc"]:
        """DataDescs from ``[(name, shape)]`` and optionally ``[(name, dtype)]``."""
        if types is not None:
            type_dict = dict(types)
            return [DataDesc(name, shape, type_dict[name]) for name, shape in shapes]
        return [DataDesc(name, shape) for name, shape in shapes]


class DataBatch:
    """One batch: lists of NDArrays ``data`` and ``label``, ``pad``, ``index`` and optional
    ``provide_data`` / ``provide_label``."""

    def __init__(self, data: Sequence[NDArray] | None, label: Sequence[NDArray] | None = None,
                 pad: int | None = None, index: Any = None, bucket_key: Any = None,
                 provide_data: list | None = None, provide_label: list | None = None) -> None:
        if data is not None and not isinstance(data, (list, tuple)):
            raise PortableError("DataBatch: data must be a list of NDArrays")
        if label is not None and not isinstance(label, (list, tuple)):
            raise PortableError("DataBatch: label must be a list of NDArrays")
        self.data = data
        self.label = label
        self.pad = pad
        self.index = index
        self.bucket_key = bucket_key
        self.provide_data = provide_data
        self.provide_label = provide_label

    def __str__(self) -> str:
        data_shapes = [d.shape for d in self.data]
        label_shapes = [lab.shape for lab in self.label] if self.label else None
        return f"{type(self).__name__}: data shapes: {data_shapes} label shapes: {label_shapes}"


class DataIter:
    """Base class: ``next()`` returns a DataBatch built from ``getdata``, ``getlabel``,
    ``getpad`` and ``getindex`` after ``iter_next()``; StopIteration at the end."""

    def __init__(self, batch_size: int = 0) -> None:
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[DataBatch]:
        return self

    def reset(self) -> None:
        """Go back to the first batch."""

    def next(self) -> DataBatch:
        if self.iter_next():
            return DataBatch(data=self.getdata(), label=self.getlabel(), pad=self.getpad(),
                             index=self.getindex())
        raise StopIteration

    def __next__(self) -> DataBatch:
        return self.next()

    def iter_next(self) -> bool:
        """Move to the next batch; whether there was one."""
        return False

    def getdata(self) -> list[NDArray] | None:
        return None

    def getlabel(self) -> list[NDArray] | None:
        return None

    def getindex(self) -> Any:
        return None

    def getpad(self) -> int | None:
        return None
