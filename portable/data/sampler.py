"""Samplers (MXNet ``gluon.data.sampler``): the order in which a DataLoader visits samples.

``RandomSampler`` draws each epoch's permutation from its own generator, seeded from
``portable.random`` when created, and can save and restore that generator's state: a resumed
run sees exactly the data order of an uninterrupted one. ``BatchSampler`` groups indices into
batches with MXNet's last-batch policies:

* ``keep``: the last batch may be smaller;
* ``discard``: drop the incomplete last batch;
* ``rollover``: carry the incomplete last batch's samples over to the next epoch.

Example:
    >>> list(BatchSampler(SequentialSampler(5), 2, "keep"))
    [[0, 1], [2, 3], [4]]
    >>> list(BatchSampler(SequentialSampler(5), 2, "discard"))
    [[0, 1], [2, 3]]
"""
from __future__ import annotations

from typing import Any, Iterator

from portable import random
from portable.errors import PortableError

LAST_BATCH = ("keep", "discard", "rollover")


class Sampler:
    """Base class: iterates over sample indices (or batches of them)."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def state_dict(self) -> dict:
        """JSON data from which ``load_state_dict`` restores the next epoch's order."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class SequentialSampler(Sampler):
    """``start, start + 1, ..., start + length - 1``."""

    def __init__(self, length: int, start: int = 0) -> None:
        self._length, self._start = int(length), int(start)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self._start, self._start + self._length))

    def __len__(self) -> int:
        return self._length


class RandomSampler(Sampler):
    """A fresh random permutation of ``range(length)`` every epoch.

    Args:
        length: the number of samples.
        seed: seeds this sampler's generator (default: drawn from ``portable.random``, so
            ``portable.random.seed`` makes the order reproducible).
    """

    def __init__(self, length: int, seed: int | None = None) -> None:
        self._length = int(length)
        self._rng = random.child(seed)

    def __iter__(self) -> Iterator[int]:
        return iter(self._rng.permutation(self._length).tolist())

    def __len__(self) -> int:
        return self._length

    def state_dict(self) -> dict:
        return {"rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self._rng.bit_generator.state = state["rng"]


class BatchSampler(Sampler):
    """Groups a sampler's indices into lists of ``batch_size``.

    Args:
        sampler: the index sampler.
        batch_size: samples per batch.
        last_batch: ``keep``, ``discard`` or ``rollover``.
    """

    def __init__(self, sampler: Sampler, batch_size: int, last_batch: str = "keep") -> None:
        if batch_size < 1:
            raise PortableError(f"batch_size must be >= 1, got {batch_size}")
        if last_batch not in LAST_BATCH:
            raise PortableError(f"last_batch must be one of {', '.join(LAST_BATCH)}, got "
                                f"{last_batch!r}")
        self._sampler, self._batch_size, self._last_batch = sampler, int(batch_size), last_batch
        self._prev: list[int] = []  # rollover: samples carried over from the previous epoch

    def __iter__(self) -> Iterator[list[int]]:
        batch, self._prev = list(self._prev), []
        for index in self._sampler:
            batch.append(index)
            if len(batch) == self._batch_size:
                yield batch
                batch = []
        if batch:
            if self._last_batch == "keep":
                yield batch
            elif self._last_batch == "rollover":
                self._prev = batch

    def __len__(self) -> int:
        count = len(self._sampler) + (len(self._prev) if self._last_batch == "rollover" else 0)
        if self._last_batch == "keep":
            return (count + self._batch_size - 1) // self._batch_size
        return count // self._batch_size

    def state_dict(self) -> dict:
        return {"sampler": self._sampler.state_dict(), "prev": list(self._prev)}

    def load_state_dict(self, state: dict) -> None:
        self._sampler.load_state_dict(state["sampler"])
        self._prev = [int(i) for i in state.get("prev", [])]
