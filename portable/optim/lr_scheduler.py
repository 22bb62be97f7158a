"""Learning-rate schedules (MXNet 1.x ``mx.lr_scheduler``): step, multi-step, poly, cosine,
each with an optional linear (or constant) warm-up.

A scheduler maps the optimizer's update number (1 for the first update) to a learning rate.
Unlike MXNet's step schedulers, which count internally and so depend on being called once per
update, these are pure functions of the update number: a run resumed from a checkpoint gets
exactly the learning rates of an uninterrupted one.

Example:
    >>> sched = FactorScheduler(step=100, factor=0.5, base_lr=0.1)
    >>> sched(100), sched(101)
    (0.1, 0.05)
    >>> warm = CosineScheduler(max_update=1000, base_lr=0.1, warmup_steps=10)
    >>> round(warm(5), 3)
    0.05
"""
from __future__ import annotations

import math
from typing import Sequence

from portable.errors import PortableError


class LRScheduler:
    """Base class: ``scheduler(num_update) -> lr``.

    Args:
        base_lr: the learning rate after warm-up (the optimizer sets it from its own
            ``learning_rate``).
        warmup_steps: updates during which the rate rises from ``warmup_begin_lr``.
        warmup_begin_lr: the rate at update 0.
        warmup_mode: ``linear`` (ramp) or ``constant`` (hold ``warmup_begin_lr``).
    """

    def __init__(self, base_lr: float = 0.01, warmup_steps: int = 0,
                 warmup_begin_lr: float = 0.0, warmup_mode: str = "linear") -> None:
        if warmup_steps < 0:
            raise PortableError(f"warmup_steps must be >= 0, got {warmup_steps}")
        if warmup_mode not in ("linear", "constant"):
            raise PortableError(f"warmup_mode must be 'linear' or 'constant', got "
                                f"{warmup_mode!r}")
        if warmup_begin_lr > base_lr:
            raise PortableError(f"warmup_begin_lr ({warmup_begin_lr}) must not exceed base_lr "
                                f"({base_lr})")
        self.base_lr = float(base_lr)
        self.warmup_steps = int(warmup_steps)
        self.warmup_begin_lr = float(warmup_begin_lr)
        self.warmup_mode = warmup_mode

    @property
    def warmup_final_lr(self) -> float:
        return self.base_lr

    def get_warmup_lr(self, num_update: int) -> float:
        """The rate during warm-up (``num_update < warmup_steps``)."""
        if self.warmup_mode == "constant":
            return self.warmup_begin_lr
        increase = (self.warmup_final_lr - self.warmup_begin_lr) * num_update / self.warmup_steps
        return self.warmup_begin_lr + increase

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        return self.scheduled_lr(num_update)

    def scheduled_lr(self, num_update: int) -> float:
        """The rate after warm-up; subclasses override."""
        return self.base_lr

    def config(self) -> dict:
        """The constructor arguments as JSON data (``from_config`` rebuilds the scheduler)."""
        conf = {"name": type(self).__name__, "base_lr": self.base_lr,
                "warmup_steps": self.warmup_steps, "warmup_begin_lr": self.warmup_begin_lr,
                "warmup_mode": self.warmup_mode}
        conf.update(self._extra_config())
        return conf

    def _extra_config(self) -> dict:
        return {}


class FactorScheduler(LRScheduler):
    """Multiply the rate by ``factor`` every ``step`` updates, never below ``stop_factor_lr``.

    Args:
        step: updates between two reductions (the first at update ``step + 1``, as MXNet).
        factor: the multiplier (< 1 decays).
        stop_factor_lr: the floor.
    """

    def __init__(self, step: int, factor: float = 1.0, stop_factor_lr: float = 1e-8,
                 base_lr: float = 0.01, warmup_steps: int = 0, warmup_begin_lr: float = 0.0,
                 warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if step < 1:
            raise PortableError(f"FactorScheduler step must be >= 1, got {step}")
        if factor > 1.0:
            raise PortableError(f"FactorScheduler factor must be <= 1 to decay, got {factor}")
        self.step, self.factor, self.stop_factor_lr = int(step), float(factor), stop_factor_lr

    def scheduled_lr(self, num_update: int) -> float:
        drops = max(0, (num_update - 1) // self.step)
        return max(self.base_lr * self.factor ** drops, self.stop_factor_lr)

    def _extra_config(self) -> dict:
        return {"step": self.step, "factor": self.factor, "stop_factor_lr": self.stop_factor_lr}


class MultiFactorScheduler(LRScheduler):
    """Multiply the rate by ``factor`` after each update number in ``step`` (increasing).

    Args:
        step: the update numbers after which the rate drops.
        factor: the multiplier.
    """

    def __init__(self, step: Sequence[int], factor: float = 1.0, base_lr: float = 0.01,
                 warmup_steps: int = 0, warmup_begin_lr: float = 0.0,
                 warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if factor > 1.0:
            raise PortableError(f"MultiFactorScheduler factor must be <= 1 to decay, got "
                                f"{factor}")
        steps = [int(s) for s in step]
        if not steps or any(b <= a for a, b in zip(steps, steps[1:])) or steps[0] < 1:
            raise PortableError(f"MultiFactorScheduler steps must be increasing and >= 1, "
                                f"got {list(step)}")
        self.step, self.factor = steps, float(factor)

    def scheduled_lr(self, num_update: int) -> float:
        drops = sum(1 for s in self.step if num_update > s)
        return self.base_lr * self.factor ** drops

    def _extra_config(self) -> dict:
        return {"step": self.step, "factor": self.factor}


class PolyScheduler(LRScheduler):
    """Polynomial decay from ``base_lr`` to ``final_lr`` over ``max_update`` updates."""

    def __init__(self, max_update: int, base_lr: float = 0.01, pwr: float = 2.0,
                 final_lr: float = 0.0, warmup_steps: int = 0, warmup_begin_lr: float = 0.0,
                 warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        _check_max_update(max_update, self.warmup_steps)
        self.max_update, self.power, self.final_lr = int(max_update), float(pwr), float(final_lr)

    def scheduled_lr(self, num_update: int) -> float:
        if num_update > self.max_update:
            return self.final_lr
        span = self.max_update - self.warmup_steps
        frac = 1.0 - (num_update - self.warmup_steps) / span
        return self.final_lr + (self.base_lr - self.final_lr) * frac ** self.power

    def _extra_config(self) -> dict:
        return {"max_update": self.max_update, "pwr": self.power, "final_lr": self.final_lr}


class CosineScheduler(LRScheduler):
    """Cosine decay from ``base_lr`` to ``final_lr`` over ``max_update`` updates."""

    def __init__(self, max_update: int, base_lr: float = 0.01, final_lr: float = 0.0,
                 warmup_steps: int = 0, warmup_begin_lr: float = 0.0,
                 warmup_mode: str = "linear") -> None:
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        _check_max_update(max_update, self.warmup_steps)
        self.max_update, self.final_lr = int(max_update), float(final_lr)

    def scheduled_lr(self, num_update: int) -> float:
        if num_update > self.max_update:
            return self.final_lr
        span = self.max_update - self.warmup_steps
        cos = 1.0 + math.cos(math.pi * (num_update - self.warmup_steps) / span)
        return self.final_lr + (self.base_lr - self.final_lr) * cos / 2.0

    def _extra_config(self) -> dict:
        return {"max_update": self.max_update, "final_lr": self.final_lr}


def _check_max_update(max_update: int, warmup_steps: int) -> None:
    if max_update < 1 or max_update <= warmup_steps:
        raise PortableError(f"max_update must be >= 1 and exceed warmup_steps "
                            f"({warmup_steps}), got {max_update}")


SCHEDULERS = {cls.__name__: cls for cls in (LRScheduler, FactorScheduler, MultiFactorScheduler,
                                            PolyScheduler, CosineScheduler)}


def from_config(conf: dict) -> LRScheduler:
    """Rebuild a scheduler from ``LRScheduler.config()`` output."""
    conf = dict(conf)
    name = conf.pop("name", None)
    cls = SCHEDULERS.get(name)
    if cls is None:
        raise PortableError(f"unknown learning-rate scheduler {name!r}; known: "
                            f"{', '.join(SCHEDULERS)}")
    return cls(**conf)
