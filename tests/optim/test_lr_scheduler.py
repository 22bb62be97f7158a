"""Learning-rate schedules against their closed forms (MXNet's definitions)."""
from __future__ import annotations

import math

import pytest

from portable.errors import PortableError
from portable.optim import lr_scheduler as ls


def test_factor_drops_after_each_step():
    s = ls.FactorScheduler(step=10, factor=0.1, base_lr=1.0, stop_factor_lr=1e-3)
    assert [s(n) for n in (1, 10, 11, 20, 21, 31, 41)] == pytest.approx(
        [1.0, 1.0, 0.1, 0.1, 0.01, 1e-3, 1e-3])


def test_multi_factor_drops_after_listed_steps():
    s = ls.MultiFactorScheduler(step=[5, 8], factor=0.5, base_lr=2.0)
    assert [s(n) for n in (1, 5, 6, 8, 9, 100)] == pytest.approx([2, 2, 1, 1, 0.5, 0.5])


def test_cosine_with_linear_warmup():
    s = ls.CosineScheduler(max_update=110, base_lr=1.0, final_lr=0.1, warmup_steps=10,
                           warmup_begin_lr=0.0)
    assert s(0) == 0.0 and s(5) == pytest.approx(0.5)
    for n in (10, 35, 60, 110):
        expected = 0.1 + 0.9 * (1 + math.cos(math.pi * (n - 10) / 100)) / 2
        assert s(n) == pytest.approx(expected)
    assert s(500) == pytest.approx(0.1)


def test_constant_warmup_and_poly():
    s = ls.PolyScheduler(max_update=20, base_lr=1.0, pwr=2, warmup_steps=4,
                         warmup_begin_lr=0.25, warmup_mode="constant")
    assert s(3) == 0.25
    assert s(12) == pytest.approx((1 - 8 / 16) ** 2)


def test_config_round_trip():
    s = ls.MultiFactorScheduler(step=[3, 7], factor=0.3, base_lr=0.5, warmup_steps=2)
    t = ls.from_config(s.config())
    assert [t(n) for n in range(12)] == [s(n) for n in range(12)]


@pytest.mark.parametrize("bad", [lambda: ls.FactorScheduler(step=0),
                                 lambda: ls.MultiFactorScheduler(step=[5, 3]),
                                 lambda: ls.CosineScheduler(max_update=5, warmup_steps=5),
                                 lambda: ls.LRScheduler(warmup_mode="exp")])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(PortableError):
        bad()
