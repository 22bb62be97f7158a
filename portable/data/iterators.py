"""MXNet 1.x's data iterators (``mx.io``): DataDesc, DataBatch, DataIter, NDArrayIter,
ResizeIter, PrefetchingIter, CSVIter and MNISTIter, with MXNet 1.9.1's batches, padding,
roll-over, names and dtypes.

An iterator yields ``DataBatch``es whose ``data`` and ``label`` are lists of NDArrays of the
batch size; ``pad`` counts the examples at the end of a batch that only fill it up.

Example:
    >>> import numpy as np, portable as mx
    >>> it = mx.io.NDArrayIter(np.arange(10).reshape(5, 2), np.arange(5), batch_size=2)
    >>> [b.pad for b in it]
    [0, 0, 1]
    >>> it.provide_data
    [DataDesc[data,(2, 2),<class 'numpy.float32'>,NCHW]]
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from portable import random
from portable.data.data_iter import DataBatch, DataDesc, DataIter
from portable.data.file_iterators import CSVIter, MNISTIter
from portable.errors import PortableError
from portable.ndarray.ndarray import NDArray, array

__all__ = ["CSVIter", "DataBatch", "DataDesc", "DataIter", "MNISTIter", "NDArrayIter",
           "PrefetchingIter", "ResizeIter"]

LAST_BATCH_HANDLES = ("pad", "discard", "roll_over")


# -- NDArrayIter ----------------------------------------------------------------------------


def _host(value: Any, name: str) -> np.ndarray:
    """A source's values on the host, in MXNet's dtype: an NDArray keeps its dtype, anything
    else becomes float32 (``mx.nd.array``'s default)."""
    if isinstance(value, NDArray):
        return value.asnumpy()
    try:
        return np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise PortableError(f"NDArrayIter: invalid type {type(value).__name__} for {name!r}, "
                            f"should be NDArray or numpy.ndarray") from error


def _init_data(data: Any, allow_empty: bool, default_name: str) -> list[tuple[str, np.ndarray]]:
    """MXNet's naming of the sources: one array is ``default_name``, a list of several
    ``_<i>_<default_name>``, a dict keeps its keys; sorted by name."""
    if data is None:
        if not allow_empty:
            raise PortableError("NDArrayIter: data must be given")
        data = []
    if isinstance(data, (np.ndarray, NDArray)):
        data = [data]
    if isinstance(data, (list, tuple)):
        if not data and not allow_empty:
            raise PortableError("NDArrayIter: data must not be an empty list")
        if len(data) == 1:
            data = OrderedDict([(default_name, data[0])])
        else:
            data = OrderedDict((f"_{i}_{default_name}", d) for i, d in enumerate(data))
    if not isinstance(data, dict):
        raise PortableError("NDArrayIter: input must be NDArray, numpy.ndarray, a list of "
                            "them or a dict with them as values")
    return sorted((k, _host(v, k)) for k, v in data.items())


class NDArrayIter(DataIter):
    """Batches over in-memory arrays (MXNet's ``mx.io.NDArrayIter``).

    Args:
        data: an array, a list of arrays (named ``_0_data``, ``_1_data``...) or a dict.
        label: the same for labels (default name ``softmax_label``), or None.
        batch_size: examples per batch.
        shuffle: shuffle at every reset, with the iterator's own generator seeded from
            ``portable.random`` when it is made: ``portable.random.seed`` makes the order
            reproducible (MXNet draws it from NumPy's global generator, which its
            ``mx.random.seed`` leaves alone, so the same script shuffled differently each run).
        last_batch_handle: ``'pad'`` (fill the last batch from the start, ``pad`` says how
            many), ``'discard'`` (drop it) or ``'roll_over'`` (carry it into the next epoch).
        data_name, label_name: the default names.
        layout: where the batch axis is (``'N'``).

    Example:
        >>> it = NDArrayIter(np.zeros((5, 2)), batch_size=2, last_batch_handle="discard")
        >>> len(list(it))
        2
    """

    def __init__(self, data: Any, label: Any = None, batch_size: int = 1,
                 shuffle: bool = False, last_batch_handle: str = "pad",
                 data_name: str = "data", label_name: str = "softmax_label",
                 layout: str = "NCHW") -> None:
        super().__init__(batch_size)
        if last_batch_handle not in LAST_BATCH_HANDLES:
            raise PortableError(f"NDArrayIter: last_batch_handle={last_batch_handle!r} is not "
                                f"one of {LAST_BATCH_HANDLES}")
        if int(batch_size) < 1:
            raise PortableError(f"NDArrayIter: batch_size must be positive, got {batch_size}")
        self.data = _init_data(data, allow_empty=False, default_name=data_name)
        self.label = _init_data(label, allow_empty=True, default_name=label_name)
        self.layout = layout
        axis = self._axis()
        self.num_data = self.data[0][1].shape[axis]
        for name, value in self.data + self.label:
            if value.ndim <= axis or value.shape[axis] != self.num_data:
                raise PortableError(f"NDArrayIter: {name!r} of shape {value.shape} does not "
                                    f"hold {self.num_data} examples along axis {axis}")
        self.idx = np.arange(self.num_data)
        self.shuffle = shuffle
        # drawn only when shuffling, so a plain iterator leaves the global stream alone
        self._rng = random.child() if shuffle else None
        self.last_batch_handle = last_batch_handle
        self.batch_size = int(batch_size)
        self.cursor = -self.batch_size
        self._cache_data: list | None = None
        self._cache_label: list | None = None
        self.reset()
        self.num_source = len(self.data) + len(self.label)

    def _axis(self) -> int:
        return self.layout.find("N")

    def _descs(self, sources: list) -> list[DataDesc]:
        axis = self._axis()
        return [DataDesc(k, tuple(v.shape[:axis]) + (self.batch_size,) + tuple(v.shape[axis + 1:]),
                         v.dtype.type, layout=self.layout) for k, v in sources]

    @property
    def provide_data(self) -> list[DataDesc]:
        return self._descs(self.data)

    @property
    def provide_label(self) -> list[DataDesc]:
        return self._descs(self.label)

    def hard_reset(self) -> None:
        """Reset ignoring roll-over: the next epoch starts at the first example."""
        if self.shuffle:
            self._shuffle_data()
        self.cursor = -self.batch_size
        self._cache_data = None
        self._cache_label = None

    def reset(self) -> None:
        if self.shuffle:
            self._shuffle_data()
        if (self.last_batch_handle == "roll_over"
                and self.num_data - self.batch_size < self.cursor < self.num_data):
            # the cached partial batch is completed from the start of the next epoch
            self.cursor = self.cursor - self.num_data - self.batch_size
        else:
            self.cursor = -self.batch_size

    def iter_next(self) -> bool:
        self.cursor += self.batch_size
        return self.cursor < self.num_data

    def next(self) -> DataBatch:
        if not self.iter_next():
            raise StopIteration
        data = self.getdata()
        label = self.getlabel()
        if data[0].shape[self._axis()] != self.batch_size:
            # a short last batch ('discard', or 'roll_over' keeping it for the next epoch)
            self._cache_data = data
            self._cache_label = label
            raise StopIteration
        return DataBatch(data=data, label=label, pad=self.getpad(), index=None)

    def _getdata(self, sources: list, start: int | None = None,
                 end: int | None = None) -> list[NDArray]:
        start = 0 if start is None else start
        end = self.num_data if end is None else end
        axis = self._axis()
        index = (slice(None),) * axis + (slice(start, end),)
        return [array(v[index], dtype=v.dtype) for _, v in sources]

    def _concat(self, first: list, second: list) -> list:
        if not first or not second:
            return first if first else second
        axis = self._axis()
        return [array(np.concatenate([a.asnumpy(), b.asnumpy()], axis=axis), dtype=a.dtype)
                for a, b in zip(first, second)]

    @staticmethod
    def _tile(data: list, repeats: int) -> list:
        return [array(np.tile(d.asnumpy(), [repeats] + [1] * (d.ndim - 1)), dtype=d.dtype)
                for d in data]

    def _batchify(self, sources: list) -> list[NDArray]:
        if self.cursor >= self.num_data:
            raise PortableError("NDArrayIter needs reset()")
        if self.last_batch_handle == "roll_over" and -self.batch_size < self.cursor < 0:
            cache = self._cache_data if self._cache_data is not None else self._cache_label
            if cache is None:
                raise PortableError("NDArrayIter: the rolled-over batch is missing")
            second = self._getdata(sources, end=self.cursor + self.batch_size)
            if self._cache_data is not None:
                self._cache_data = None
            else:
                self._cache_label = None
            return self._concat(cache, second)
        if self.last_batch_handle == "pad" and self.cursor + self.batch_size > self.num_data:
            pad = self.batch_size - self.num_data + self.cursor
            first = self._getdata(sources, start=self.cursor)
            if pad > self.num_data:
                second = self._tile(self._getdata(sources, end=self.num_data),
                                    pad // self.num_data)
                if pad % self.num_data:
                    second = self._concat(second, self._getdata(sources,
                                                                end=pad % self.num_data))
            else:
                second = self._getdata(sources, end=pad)
            return self._concat(first, second)
        end = min(self.cursor + self.batch_size, self.num_data)
        return self._getdata(sources, self.cursor, end)

    def getdata(self) -> list[NDArray]:
        return self._batchify(self.data)

    def getlabel(self) -> list[NDArray]:
        return self._batchify(self.label)

    def getpad(self) -> int:
        if self.last_batch_handle == "pad" and self.cursor + self.batch_size > self.num_data:
            return self.cursor + self.batch_size - self.num_data
        if self.last_batch_handle == "roll_over" and -self.batch_size < self.cursor < 0:
            return -self.cursor
        return 0

    def _shuffle_data(self) -> None:
        # MXNet shuffles the index in place and reorders the (already shuffled) sources by
        # it; reordered sources become float32, as MXNet's ``array(v.asnumpy()[idx])`` does.
        self._rng.shuffle(self.idx)
        self.data = [(k, v[self.idx].astype(np.float32)) for k, v in self.data]
        self.label = [(k, v[self.idx].astype(np.float32)) for k, v in self.label]


# -- wrappers -------------------------------------------------------------------------------


class _WrappingIter(DataIter):
    """An iterator that hands out batches it keeps in ``current_batch``: its fields are that
    batch's."""

    def getdata(self):
        return self.current_batch.data

    def getlabel(self):
        return self.current_batch.label

    def getindex(self):
        return self.current_batch.index

    def getpad(self):
        return self.current_batch.pad


class ResizeIter(_WrappingIter):
    """Makes ``data_iter`` yield exactly ``size`` batches per epoch, restarting it when it
    runs out (MXNet's ``mx.io.ResizeIter``)."""

    def __init__(self, data_iter: DataIter, size: int, reset_internal: bool = True) -> None:
        super().__init__()
        self.data_iter = data_iter
        self.size = int(size)
        self.reset_internal = reset_internal
        self.cur = 0
        self.current_batch: DataBatch | None = None
        self.provide_data = data_iter.provide_data
        self.provide_label = data_iter.provide_label
        self.batch_size = data_iter.batch_size
        if hasattr(data_iter, "default_bucket_key"):
            self.default_bucket_key = data_iter.default_bucket_key

    def reset(self) -> None:
        self.cur = 0
        if self.reset_internal:
            self.data_iter.reset()

    def iter_next(self) -> bool:
        if self.cur == self.size:
            return False
        try:
            self.current_batch = self.data_iter.next()
        except StopIteration:
            self.data_iter.reset()
            self.current_batch = self.data_iter.next()
        self.cur += 1
        return True


class PrefetchingIter(_WrappingIter):
    """Joins the batches of one or more iterators (their data and labels concatenated, names
    optionally renamed), as MXNet's ``mx.io.PrefetchingIter``. Batches are read when asked
    for: NDArray work is already asynchronous through the engine, so no thread is needed."""

    def __init__(self, iters: Any, rename_data: list | None = None,
                 rename_label: list | None = None) -> None:
        super().__init__()
        self.iters = list(iters) if isinstance(iters, (list, tuple)) else [iters]
        if not self.iters:
            raise PortableError("PrefetchingIter needs at least one iterator")
        self.n_iter = len(self.iters)
        self.rename_data = rename_data
        self.rename_label = rename_label
        self.batch_size = self.provide_data[0][1][0]
        self.current_batch: DataBatch | None = None

    def _renamed(self, attr: str, renames: list | None) -> list[DataDesc]:
        if renames is None:
            return sum([list(getattr(i, attr)) for i in self.iters], [])
        return sum([[DataDesc(r[x.name], x.shape, x.dtype) if isinstance(x, DataDesc)
                     else DataDesc(*x) for x in getattr(i, attr)]
                    for r, i in zip(renames, self.iters)], [])

    @property
    def provide_data(self) -> list[DataDesc]:
        return self._renamed("provide_data", self.rename_data)

    @property
    def provide_label(self) -> list[DataDesc]:
        return self._renamed("provide_label", self.rename_label)

    def reset(self) -> None:
        for it in self.iters:
            it.reset()

    def iter_next(self) -> bool:
        batches = []
        for it in self.iters:
            try:
                batches.append(it.next())
            except StopIteration:
                batches.append(None)
        if batches[0] is None:
            if any(b is not None for b in batches):
                raise PortableError("PrefetchingIter: the iterators hold different numbers "
                                    "of batches")
            return False
        if any(b is None or b.pad != batches[0].pad for b in batches):
            raise PortableError("PrefetchingIter: the iterators' batches do not line up")
        self.current_batch = DataBatch(sum([list(b.data) for b in batches], []),
                                       sum([list(b.label or []) for b in batches], []),
                                       batches[0].pad, batches[0].index,
                                       provide_data=self.provide_data,
                                       provide_label=self.provide_label)
        return True

    def next(self) -> DataBatch:
        if self.iter_next():
            return self.current_batch
        raise StopIteration
