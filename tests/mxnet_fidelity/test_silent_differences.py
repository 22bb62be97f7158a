"""portable against the real MXNet 1.9.1's recorded answers (``fixtures/``, written by
``record_mxnet.py``) for the calls that used to give another answer with no error: a
comparison's dtype, argmax without an axis, split by ``num_outputs``, the shape of one value,
the dtype ``nd.array`` makes of NumPy data, and ``data=`` in the symbol functions."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import portable as mx
from tests.mxnet_fidelity.cases import SETUP, SILENT

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "silent_differences.json")
                     .read_text())


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


def test_the_fixture_was_recorded_by_mxnet_1_9_1_from_these_cases():
    assert FIXTURE["recorded_with"]["mxnet"] == "1.9.1"
    assert FIXTURE["cases"] == SILENT and FIXTURE["setup"] == SETUP


@pytest.mark.parametrize("name", sorted(SILENT))
def test_portable_answers_as_mxnet_does(name):
    scope = {"mx": mx}
    exec(SETUP + SILENT[name], scope)  # noqa: S102 - the cases are this repository's snippets
    got, want = describe(scope["out"]), FIXTURE["answers"][name]
    if want["kind"] == "array" and got["kind"] == "array":
        assert (got["dtype"], got["shape"]) == (want["dtype"], want["shape"]), (got, want)
        np.testing.assert_allclose(np.asarray(got["values"], np.float64),
                                   np.asarray(want["values"], np.float64), rtol=1e-6)
    else:
        assert got == want
