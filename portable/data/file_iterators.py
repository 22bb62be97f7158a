"""MXNet 1.x's file-reading iterators: ``CSVIter`` and ``MNISTIter`` (``mx.io``).

Both read their files whole (sizes checked first), then serve fixed-size batches as MXNet's
C++ iterators do: the data is named ``data`` and the label ``softmax_label``, both float32
unless ``dtype`` says otherwise, and a label of width 1 has shape (batch,).

Example:
    >>> import portable as mx                                        # doctest: +SKIP
    >>> it = mx.io.CSVIter(data_csv="x.csv", data_shape=(3,), batch_size=2)  # doctest: +SKIP
"""
from __future__ import annotations

import os
from math import prod
from typing import Any, Sequence

import numpy as np

from portable.data.idx import read_idx
from portable.data.data_iter import DataBatch, DataDesc, DataIter
from portable.errors import PortableError, SerializationError
from portable.io.files import read_text
from portable.ndarray.ndarray import NDArray, array

# The most values one CSV file may hold (its text is read into memory).
MAX_CSV_VALUES = 1 << 28
MAX_CSV_BYTES = 1 << 31  # (the text is held in memory while parsed)


def _read_csv(path: str | os.PathLike, width: int, dtype: Any) -> np.ndarray:
    """The rows of a headerless numeric CSV file, each of ``width`` values: (rows, width)."""
    path = os.fspath(path)
    text = read_text(path, "CSV data", MAX_CSV_BYTES)
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            values = [float(v) for v in line.split(",")]
        except ValueError as error:
            raise SerializationError(f"CSVIter: {path!r} line {number}: {error}") from None
        if len(values) != width:
            raise SerializationError(f"CSVIter: {path!r} line {number} has {len(values)} "
                                     f"values; the shape asks for {width}")
        rows.append(values)
        if len(rows) * width > MAX_CSV_VALUES:
            raise SerializationError(f"CSVIter: {path!r} holds more than {MAX_CSV_VALUES} "
                                     f"values")
    return np.asarray(rows, dtype=dtype).reshape(len(rows), width)


class _BatchLoader(DataIter):
    """Fixed-size batches over in-memory (data, label) arrays, MXNet's C++ batch loader:
    with ``round_batch`` the last batch is completed from the start of the data and the next
    epoch begins after the examples so borrowed; without it the last batch is padded (with
    zeros here) and ``pad`` says how many rows to ignore."""

    def __init__(self, data: np.ndarray, label: np.ndarray, batch_size: int,
                 round_batch: bool, data_name: str = "data",
                 label_name: str = "softmax_label") -> None:
        super().__init__(int(batch_size))
        if self.batch_size < 1:
            raise PortableError(f"batch_size must be positive, got {batch_size}")
        if len(data) != len(label):
            raise PortableError(f"{len(data)} data rows but {len(label)} label rows")
        if not len(data):
            raise PortableError("the data holds no examples")
        self._data, self._label = data, label
        self.round_batch = bool(round_batch)
        self._start = 0  # where the next epoch begins
        self._cursor = 0
        self._batch: DataBatch | None = None
        self.provide_data = [DataDesc(data_name, (self.batch_size,) + data.shape[1:],
                                      data.dtype.type)]
        self.provide_label = [DataDesc(label_name, (self.batch_size,) + label.shape[1:],
                                       label.dtype.type)]

    def reset(self) -> None:
        self._cursor = self._start

    def iter_next(self) -> bool:
        total = len(self._data)
        if self._cursor >= total:
            return False
        stop = self._cursor + self.batch_size
        index = np.arange(self._cursor, min(stop, total))
        pad = max(stop - total, 0)
        self._start = 0
        if pad and self.round_batch:
            index = np.concatenate([index, np.arange(pad) % total])
            self._start = pad % total if pad < total else 0
        data, label = self._data[index], self._label[index]
        if pad and not self.round_batch:
            data = np.concatenate([data, np.zeros((pad,) + data.shape[1:], data.dtype)])
            label = np.concatenate([label, np.zeros((pad,) + label.shape[1:], label.dtype)])
        self._cursor = stop
        self._batch = DataBatch([array(data, dtype=data.dtype)],
                                [array(label, dtype=label.dtype)], pad,
                                index.astype(np.uint64))
        return True

    def next(self) -> DataBatch:
        if self.iter_next():
            return self._batch
        raise StopIteration

    def getdata(self) -> NDArray:
        return self._batch.data[0]

    def getlabel(self) -> NDArray:
        return self._batch.label[0]

    def getindex(self) -> np.ndarray:
        return self._batch.index

    def getpad(self) -> int:
        return self._batch.pad


class CSVIter(_BatchLoader):
    """Batches from CSV files (MXNet's ``mx.io.CSVIter``).

    Args:
        data_csv: the data file, one example per line.
        data_shape: the shape of one example (the line's values, reshaped).
        label_csv: the label file; None gives zero labels.
        label_shape: the shape of one label ((1,): labels of shape (batch,)).
        batch_size: examples per batch.
        round_batch: complete the last batch from the start (else pad it).
        dtype: ``float32``, ``int32`` or ``int64``.
    """

    def __init__(self, data_csv: str, data_shape: Sequence[int], label_csv: str | None = None,
                 label_shape: Sequence[int] = (1,), batch_size: int = 1,
                 round_batch: bool = True, dtype: Any = "float32", **_: Any) -> None:
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.int32, np.int64):
            raise PortableError(f"CSVIter: dtype must be float32, int32 or int64, got {dtype}")
        data_shape = tuple(int(d) for d in data_shape)
        label_shape = tuple(int(d) for d in label_shape)
        data = _read_csv(data_csv, prod(data_shape), dtype).reshape((-1,) + data_shape)
        if label_csv is None or label_csv == "NULL":
            label = np.zeros((len(data),) + label_shape, dtype)
        else:
            label = _read_csv(label_csv, prod(label_shape), dtype).reshape(
                (-1,) + label_shape)
        if label_shape == (1,):
            label = label.reshape(len(label))
        super().__init__(data, label, batch_size, round_batch)


class MNISTIter(_BatchLoader):
    """Batches of MNIST from its IDX files (MXNet's ``mx.io.MNISTIter``): images scaled by
    1/256 as float32, shape (batch, 1, 28, 28) or (batch, 784) with ``flat``; labels float32
    (batch,). A last batch shorter than ``batch_size`` is dropped, as MXNet does.

    Args:
        image, label: the IDX files (raw or gzip).
        batch_size: examples per batch.
        shuffle: shuffle the examples once, with ``seed``. (MXNet's C++ generator differs,
            so the order is not MXNet's.)
        flat: flatten each image.
        seed: the shuffle's seed.
        num_parts, part_index: read only part ``part_index`` of ``num_parts`` equal parts.
    """

    def __init__(self, image: str = "./train-images-idx3-ubyte",
                 label: str = "./train-labels-idx1-ubyte", batch_size: int = 128,
                 shuffle: bool = True, flat: bool = False, seed: int = 0,
                 silent: bool = False, num_parts: int = 1, part_index: int = 0,
                 **_: Any) -> None:
        images = read_idx(image)
        labels = read_idx(label)
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise SerializationError(f"MNISTIter: {image!r} {images.shape} and {label!r} "
                                     f"{labels.shape} are not images and their labels")
        if not 0 <= int(part_index) < int(num_parts):
            raise PortableError(f"MNISTIter: part_index {part_index} is not in "
                                f"[0, {num_parts})")
        step = len(images) // int(num_parts)
        part = slice(step * int(part_index), step * (int(part_index) + 1))
        images, labels = images[part], labels[part]
        if shuffle:
            order = np.random.RandomState(int(seed)).permutation(len(images))
            images, labels = images[order], labels[order]
        keep = len(images) // int(batch_size) * int(batch_size)
        data = images[:keep].astype(np.float32) * np.float32(1.0 / 256.0)
        data = data.reshape(keep, -1) if flat else data.reshape(keep, 1, *images.shape[1:])
        super().__init__(data, labels[:keep].astype(np.float32), batch_size,
                         round_batch=False)
