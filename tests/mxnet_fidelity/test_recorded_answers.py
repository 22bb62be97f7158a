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
from tests.mxnet_fidelity.cases import SETS, SETUP

FIXTURES = {name: json.loads((Path(__file__).parent / "fixtures" / f"{name}.json").read_text())
            for name in SETS}


def describe(out) -> dict:
    """What portable gave, in the fixture's terms (see ``record_mxnet.describe``)."""
    if isinstance(out, mx.sym.Symbol):
        _, shapes, _ = out.infer_shape(x=(2, 3))
        return {"kind": "symbol", "arguments": out.list_arguments(),
                "shapes": [list(s) for s in shapes],
                "dtypes": [np.dtype(d).name for d in out.infer_type(x=np.float32)[1]]}
    if isinstance(out, (list, tuple)):
        return {"kind": "list", "items": [describe(item) for item in out]}
    value = out.asnumpy()
    return {"kind": "array", "dtype": value.dtype.name, "shape": list(value.shape),
            "values": value.tolist()}


@pytest.mark.parametrize("set_name", sorted(SETS))
def test_the_fixture_was_recorded_by_mxnet_1_9_1_from_these_cases(set_name):
    fixture = FIXTURES[set_name]
    assert fixture["recorded_with"]["mxnet"] == "1.9.1"
    assert fixture["cases"] == SETS[set_name] and fixture["setup"] == SETUP


@pytest.mark.parametrize("set_name, name", [(s, n) for s in sorted(SETS) for n in sorted(SETS[s])])
def test_portable_answers_as_mxnet_does(set_name, name):
    scope = {"mx": mx}
    exec(SETUP + SETS[set_name][name], scope)  # noqa: S102 - this repository's snippets
    got, want = describe(scope["out"]), FIXTURES[set_name]["answers"][name]
    if want["kind"] == "array" and got["kind"] == "array":
        assert (got["dtype"], got["shape"]) == (want["dtype"], want["shape"]), (got, want)
        np.testing.assert_allclose(np.asarray(got["values"], np.float64),
                                   np.asarray(want["values"], np.float64), rtol=1e-6)
    else:
        assert got == want
