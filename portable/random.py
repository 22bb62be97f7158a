"""Seeding: one call makes every random op and initializer reproducible on the CPU.

Example:
    >>> import portable
    >>> portable.random.seed(42)
"""
from __future__ import annotations

import numpy as np

_generator = np.random.default_rng(0)


def seed(value: int) -> None:
    """Reseed the generator behind random ops, initializers and data shuffling."""
    global _generator
    _generator = np.random.default_rng(int(value))


def generator() -> np.random.Generator:
    """The process-wide generator (reseeded by :func:`seed`)."""
    return _generator


def child(seed: int | None = None) -> np.random.Generator:
    """A generator of its own (a sampler's, an iterator's, a transform's): seeded with
    ``seed``, else with a draw from the process-wide generator, so that :func:`seed` makes it
    reproducible too."""
    if seed is None:
        seed = int(_generator.integers(2 ** 63))
    return np.random.default_rng(seed)


def get_state() -> dict:
    """The generator state as JSON-serialisable data (for checkpoints)."""
    return _generator.bit_generator.state


def set_state(state: dict) -> None:
    _generator.bit_generator.state = state
