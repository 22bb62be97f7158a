"""DataLoader (MXNet ``gluon.data.DataLoader``): batches from a dataset, prefetched on the engine.

Loading is MXNet's prefetching iterator: each batch is loaded on the loader's own thread (not
an engine op, because samples may be NDArrays that the load reads, which an engine op may not
wait for); the iterator keeps ``prefetch`` of them in flight and waits on the oldest before
handing its batch out. Batches therefore arrive in order, loading overlaps the compute queued
on the engine, and an exception raised while loading (a missing file, a bad transform) is
re-raised by the iterator when that batch is due, with a note naming the batch.

The loader remembers where it is: ``state_dict()`` gives the sampler state at the start of the
current epoch and the number of batches handed out, and ``load_state_dict`` makes the next
iteration regenerate that epoch's order and skip the batches already consumed, so a resumed run
sees exactly the batches an uninterrupted one would.

Example:
    >>> import numpy as np
    >>> from portable.data import ArrayDataset
    >>> loader = DataLoader(ArrayDataset(np.zeros((10, 3)), np.arange(10)), batch_size=4)
    >>> [x.shape for x, y in loader]
    [(4, 3), (4, 3), (2, 3)]
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

import numpy as np

from portable.data.dataset import Dataset, _Columns
from portable.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from portable.errors import PortableError
from portable.numpy.mode import is_np_array
from portable.numpy.multiarray import as_np


def _to_nd(array: Any) -> Any:
    from portable.ndarray.ndarray import NDArray, array as nd_array

    if not isinstance(array, NDArray):
        array = np.asarray(array)
        array = nd_array(array, dtype=array.dtype)  # (MXNet keeps the NumPy dtype, float64 too)
    return as_np(array) if is_np_array() else array  # (mx.np batches in NumPy mode)


def default_batchify_fn(data: list) -> Any:
    """MXNet's batchify: NDArray samples stacked, tuples column by column into a list, NumPy
    data and numbers stacked into an NDArray of their own dtype."""
    if isinstance(data, _Columns):
        return _to_nd(data[0]) if data.single else [_to_nd(c) for c in data]
    first = data[0]
    if isinstance(first, tuple):
        return [default_batchify_fn(list(column)) for column in zip(*data)]
    if hasattr(first, "asnumpy"):
        data = [d.asnumpy() for d in data]
    return _to_nd(np.stack([np.asarray(d) for d in data]))


class DataLoader:
    """Iterates over a dataset in batches.

    Args:
        dataset: the Dataset.
        batch_size: samples per batch (required unless ``batch_sampler`` is given).
        shuffle: visit samples in a new random order each epoch.
        sampler: a custom index sampler (excludes ``shuffle``).
        last_batch: ``keep`` (default), ``discard`` or ``rollover``.
        batch_sampler: a custom batch sampler (excludes the four arguments above).
        batchify_fn: turns a list of samples into a batch (default: stack into NDArrays).
        num_workers: accepted for MXNet compatibility; loading runs on the loader's
            worker thread (processes would need pickling).
        prefetch: batches loaded ahead (0: load synchronously on the calling thread).
        seed: seeds the shuffling order (default: drawn from ``portable.random``).
    """

    def __init__(self, dataset: Dataset, batch_size: int | None = None, shuffle: bool = False,
                 sampler: Sampler | None = None, last_batch: str | None = None,
                 batch_sampler: Sampler | None = None,
                 batchify_fn: Callable[[list], Any] | None = None, num_workers: int = 0,
                 pin_memory: bool = False, prefetch: int | None = None,
                 seed: int | None = None, **_: Any) -> None:
        self._dataset = dataset
        if batch_sampler is None:
            if batch_size is None:
                raise PortableError("DataLoader needs batch_size when batch_sampler is not "
                                    "given")
            if sampler is None:
                sampler = (RandomSampler(len(dataset), seed) if shuffle
                           else SequentialSampler(len(dataset)))
            elif shuffle:
                raise PortableError("DataLoader: shuffle must be False when a sampler is given")
            batch_sampler = BatchSampler(sampler, batch_size, last_batch or "keep")
        elif batch_size is not None or shuffle or sampler is not None or last_batch is not None:
            raise PortableError("DataLoader: batch_size, shuffle, sampler and last_batch must "
                                "not be given with batch_sampler")
        self._batch_sampler = batch_sampler
        self._batchify_fn = batchify_fn or default_batchify_fn
        self._prefetch = max(0, int(prefetch if prefetch is not None
                                    else max(2, 2 * int(num_workers))))
        self._epoch_state = batch_sampler.state_dict()
        self._position = 0  # batches handed out in the current epoch
        self._skip = 0      # batches to skip in the next epoch (set by load_state_dict)

    def __len__(self) -> int:
        return len(self._batch_sampler)

    # -- resumable position ------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where the loader is: JSON data for ``load_state_dict``."""
        return {"batch_sampler": self._epoch_state, "batches_done": self._position}

    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state``: the next iteration repeats that epoch's order and skips the
        batches already handed out."""
        self._batch_sampler.load_state_dict(state["batch_sampler"])
        self._epoch_state = state["batch_sampler"]
        self._skip = self._position = int(state["batches_done"])

    # -- iteration -----------------------------------------------------------------------------
    def _load(self, indices: list[int]) -> Any:
        samples = self._dataset.get_batch(indices)
        if isinstance(samples, _Columns) and self._batchify_fn is not default_batchify_fn:
            samples = [tuple(c[i] for c in samples) if not samples.single else samples[0][i]
                       for i in range(len(indices))]
        return self._batchify_fn(samples)

    def __iter__(self) -> Iterator[Any]:
        self._epoch_state = self._batch_sampler.state_dict()
        batches = list(self._batch_sampler)
        skip, self._skip = self._skip, 0
        self._position = skip
        source = (self._prefetched(batches[skip:]) if self._prefetch
                  else (self._load(b) for b in batches[skip:]))
        for batch in source:
            self._position += 1
            yield batch
        # the epoch is complete: the next one starts from the sampler's current state
        self._epoch_state = self._batch_sampler.state_dict()
        self._position = 0

    def _prefetched(self, batches: list[list[int]]) -> Iterator[Any]:
        in_flight: deque = deque()
        pending = iter(enumerate(batches))
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="DataLoader")

        def push_next() -> None:
            item = next(pending, None)
            if item is not None:
                number, indices = item
                in_flight.append((f"DataLoader.batch[{number}]",
                                  pool.submit(self._load, indices)))

        for _ in range(self._prefetch):
            push_next()
        try:
            while in_flight:
                name, future = in_flight.popleft()
                push_next()
                try:
                    batch = future.result()
                except Exception as error:  # re-raised on the consuming thread, as MXNet does
                    error.add_note(f"(raised while loading {name} on the loader's thread)")
                    raise
                yield batch
        finally:  # an abandoned iterator: drop the loads not started, let the others finish
            for _, future in in_flight:
                future.cancel()
            pool.shutdown(wait=False)
