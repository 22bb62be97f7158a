"""Twelve MXNet 1.x tutorial scripts, one per area (NDArray, autograd, Gluon blocks, hybridize,
Trainer, data loading, the Module API, the Symbol API, KVStore, ``mx.np``, custom operators,
the model zoo), run under portable with only the import changed, must reach what the real
MXNet 1.9.1 reached on the same script and data (``fixtures/tutorials.json``, recorded by
``record_tutorials.py``).

How a result is held to MXNet's:
- an accuracy must reach MXNet's mean accuracy over its recorded runs (the script's own seed
  and seeds 0-4, ``accuracy_by_seed`` in the fixture) less three standard errors of an
  accuracy measured on the 360 test images (``sqrt(p (1 - p) / 360)``, about 0.02 at 0.98):
  the two frameworks draw different initial weights and shuffles from the same seed, so one
  portable run is one draw from a spread that MXNet's own runs show; three standard errors
  keep a chance failure of an equivalent run near one in a thousand, while a real shortfall
  of two points or more fails. A script that takes its initial weights from NumPy (the
  Symbol API's) has one recorded run;
- a loss (``*_loss``) may be at most 1.5 times MXNet's, and an estimate's error (``*_error``)
  at most 0.002 above MXNet's (the synthetic data's noise is 0.01 over 1,000 samples);
- everything else (counts, shapes, values computed without random draws) must equal MXNet's
  to 1e-4 relative.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.mxnet_fidelity.tutorial_scripts import FOLDER, SCRIPTS, fingerprint, run

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "tutorials.json").read_text())


TEST_IMAGES = 360  # digits_data.py holds out 360 of the 1,797 images


def accuracy_bar(record: dict) -> float:
    """MXNet's mean accuracy over its recorded runs of the script, less three standard errors
    of one run's accuracy on the test images."""
    reached = [record["metrics"]["accuracy"], *record.get("accuracy_by_seed", {}).values()]
    mean = sum(reached) / len(reached)
    return mean - 3 * math.sqrt(mean * (1 - mean) / TEST_IMAGES)


def check(metric: str, got: float, want: float, bar: float) -> None:
    if "accuracy" in metric:
        assert got >= bar, f"{metric}: {got:.4f}, below {bar:.4f} (MXNet reached {want:.4f})"
    elif metric.endswith("_loss"):
        assert got <= 1.5 * want, f"{metric}: {got:.3g}, MXNet reached {want:.3g}"
    elif metric.endswith("_error"):
        assert got <= want + 0.002, f"{metric}: {got:.3g}, MXNet reached {want:.3g}"
    else:
        assert got == pytest.approx(want, rel=1e-4, abs=1e-6), f"{metric}: {got} != {want}"


def test_there_are_twelve_scripts_and_each_was_recorded_as_it_is_now():
    assert len(SCRIPTS) == 12
    assert FIXTURE["recorded_with"]["mxnet"] == "1.9.1"
    for name in SCRIPTS:
        assert FIXTURE["scripts"][name]["sha256"] == fingerprint(name), \
            f"{name}.py changed since MXNet's result was recorded: run record_tutorials.py"


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_script_reaches_what_mxnet_reached(name):
    got = run(FOLDER / f"{name}.py")
    record = FIXTURE["scripts"][name]
    want = record["metrics"]
    assert sorted(got) == sorted(want)
    bar = accuracy_bar(record) if "accuracy" in want else None
    for metric in want:
        check(metric, got[metric], want[metric], bar)
