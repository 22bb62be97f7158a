"""portable against the real MXNet 1.9.1's recorded answers (``fixtures/``, written by
``record_mxnet.py``): the calls that used to give another answer with no error (a
comparison's dtype, argmax without an axis, split by ``num_outputs``, the shape of one value,
the dtype ``nd.array`` makes of NumPy data, ``data=`` in the symbol functions), and MXNet's
keyword names and defaults where the ONNX op's differ."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import portable as mx
from tests.mxnet_fidelity.answers import assert_same, describe
from tests.mxnet_fidelity.cases import SETS, SETUPS

FIXTURES = {name: json.loads((Path(__file__).parent / "fixtures" / f"{name}.json").read_text())
            for name in SETS}


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_the_fixture_was_recorded_by_mxnet_1_9_1_from_these_cases(set_name):
    fixture = FIXTURES[set_name]
    assert fixture["recorded_with"]["mxnet"] == "1.9.1"
    assert fixture["cases"] == SETS[set_name] and fixture["setup"] == SETUPS[set_name]


@pytest.mark.parametrize("set_name, name", [(s, n) for s in sorted(SETS) for n in sorted(SETS[s])])
def test_portable_answers_as_mxnet_does(set_name, name):
    scope = {"mx": mx}
    exec(SETUPS[set_name] + SETS[set_name][name], scope)  # noqa: S102 - this repository's snippets
    assert_same(describe(scope["out"], mx), FIXTURES[set_name]["answers"][name])
