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


def get_state() -> dict:
    """The generator state as JSON-serialisable data (for checkpoints)."""
    return _generator.bit_generator.state


def set_state(state: dict) -> None:
    _generator.bit_generator.state = state
