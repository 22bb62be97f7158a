"""Datasets (MXNet ``gluon.data``): indexable collections of samples, with lazy transforms.

Example:
    >>> import numpy as np
    >>> ds = ArrayDataset(np.arange(6).reshape(3, 2), np.array([0, 1, 0]))
    >>> len(ds), ds[1][1]
    (3, np.int64(1))
    >>> ds.transform_first(lambda x: x * 10)[1][0].tolist()
    [20, 30]
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from portable.errors import PortableError, ShapeError


class Dataset:
    """Abstract dataset: ``__getitem__(idx)`` and ``__len__``."""

    def __getitem__(self, idx: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def get_batch(self, indices: Sequence[int]) -> list:
        """The samples at ``indices`` (subclasses may fetch them in one vectorised step)."""
        return [self[int(i)] for i in indices]

    def transform(self, fn: Callable[..., Any], lazy: bool = True) -> "Dataset":
        """A dataset whose samples are ``fn(*sample)`` (``fn(sample)`` for non-tuples).

        Args:
            fn: the transform.
            lazy: apply on access (True) or once, now, into a SimpleDataset (False).
        """
        transformed = _TransformDataset(self, fn)
        if lazy:
            return transformed
        return SimpleDataset([transformed[i] for i in range(len(transformed))])

    def transform_first(self, fn: Callable[[Any], Any], lazy: bool = True) -> "Dataset":
        """Transform only the first element of each sample (the data, not the label)."""
        return self.transform(_First(fn), lazy)

    def filter(self, fn: Callable[[Any], bool]) -> "Dataset":
        """The samples for which ``fn(sample)`` is true."""
        return _SubsetDataset(self, [i for i in range(len(self)) if fn(self[i])])

    def take(self, count: int | None) -> "Dataset":
        """The first ``count`` samples (all when None)."""
        if count is None or count >= len(self):
            return self
        return _SubsetDataset(self, list(range(count)))

    def shard(self, num_shards: int, index: int) -> "Dataset":
        """Shard ``index`` of ``num_shards`` contiguous, nearly equal parts (for data parallel
        workers)."""
        if not 0 <= index < num_shards:
            raise PortableError(f"shard index {index} out of range for {num_shards} shards")
        length = len(self)
        size, extra = divmod(length, num_shards)
        start = index * size + min(index, extra)
        stop = start + size + (1 if index < extra else 0)
        return _SubsetDataset(self, list(range(start, stop)))


class SimpleDataset(Dataset):
    """A dataset over any indexable sequence (a list, an array).

    Args:
        data: the samples.
    """

    def __init__(self, data: Any) -> None:
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, idx: int) -> Any:
        return self._data[idx]


def _host(array: Any) -> Any:
    """MXNet keeps NDArrays (their items are NDArrays) but turns 1-D ones into NumPy arrays."""
    if hasattr(array, "asnumpy") and len(array.shape) == 1:
        return array.asnumpy()
    return array


class ArrayDataset(Dataset):
    """Samples drawn from several arrays of equal length: ``ds[i] = (a[i], b[i], ...)``.

    Items are what the arrays give (MXNet's rule): NumPy rows for NumPy arrays, NDArray rows
    for NDArrays of two or more axes (1-D NDArrays become NumPy arrays, so a label is a NumPy
    scalar); a single array gives samples that are not tuples.

    Args:
        *args: arrays, NDArrays or lists, all of the same length.
    """

    def __init__(self, *args: Any) -> None:
        if not args:
            raise PortableError("ArrayDataset needs at least one array")
        self._data = [_host(a) for a in args]
        lengths = {len(a) for a in self._data}
        if len(lengths) != 1:
            raise ShapeError(f"ArrayDataset arrays differ in length: "
                             f"{[len(a) for a in self._data]}")
        self._length = lengths.pop()

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, idx: int) -> Any:
        if len(self._data) == 1:
            return self._data[0][idx]
        return tuple(a[idx] for a in self._data)

    def get_batch(self, indices: Sequence[int]) -> Any:
        if all(isinstance(a, np.ndarray) for a in self._data):
            index = np.asarray(indices, dtype=np.int64)
            return _Columns(tuple(a[index] for a in self._data), single=len(self._data) == 1)
        return super().get_batch(indices)


class _Columns(tuple):
    """A batch already stacked column by column (the fast path of ArrayDataset)."""

    def __new__(cls, columns: tuple, single: bool) -> "_Columns":
        out = super().__new__(cls, columns)
        out.single = single
        return out


class _First:
    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, first: Any, *rest: Any) -> Any:
        return (self.fn(first), *rest) if rest else self.fn(first)


class _TransformDataset(Dataset):
    def __init__(self, data: Dataset, fn: Callable[..., Any]) -> None:
        self._data, self._fn = data, fn

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, idx: int) -> Any:
        item = self._data[idx]
        return self._fn(*item) if isinstance(item, tuple) else self._fn(item)


class _SubsetDataset(Dataset):
    def __init__(self, data: Dataset, indices: list[int]) -> None:
        self._data, self._indices = data, indices

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, idx: int) -> Any:
        return self._data[self._indices[idx]]

    def get_batch(self, indices: Sequence[int]) -> Any:
        return self._data.get_batch([self._indices[int(i)] for i in indices])
