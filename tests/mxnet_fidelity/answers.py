"""What a case's ``out`` holds, in the fixture's terms, for either ``mx`` (the real MXNet when
``record_mxnet.py`` runs, portable when the tests run), and the comparison of two answers.

An answer is one of:
- an array (anything with ``asnumpy()``, or a NumPy array): its dtype, shape and values;
- a symbol: its arguments, and the shapes and dtypes inferred for ``x`` of shape (2, 3);
- a list (list or tuple) or dict of answers;
- a plain value: a number, bool, string or None (a NumPy scalar as its Python value).
"""
from __future__ import annotations

import numpy as np

# Float results are compared to a few float32 ulps: MXNet and portable may sum or factorise in
# another order. Integers, dtypes, shapes, strings and bools must be equal.
RTOL, ATOL = 1e-5, 1e-6


def describe(out, mx) -> dict:
    if isinstance(out, mx.sym.Symbol):
        _, shapes, _ = out.infer_shape(x=(2, 3))
        _, dtypes, _ = out.infer_type(x=np.float32)
        return {"kind": "symbol", "arguments": out.list_arguments(),
                "shapes": [list(s) for s in shapes],
                "dtypes": [np.dtype(d).name for d in dtypes]}
    if isinstance(out, (list, tuple)):
        return {"kind": "list", "items": [describe(item, mx) for item in out]}
    if isinstance(out, dict):
        return {"kind": "dict", "items": {str(k): describe(v, mx) for k, v in out.items()}}
    if isinstance(out, np.generic):
        out = out.item()
    if out is None or isinstance(out, (bool, int, float, str)):
        return {"kind": "value", "value": out}
    value = out if isinstance(out, np.ndarray) else out.asnumpy()
    return {"kind": "array", "dtype": value.dtype.name, "shape": list(value.shape),
            "values": value.tolist()}


def assert_same(got: dict, want: dict, where: str = "out") -> None:
    """Raise AssertionError naming the first place where ``got`` differs from ``want``."""
    assert got["kind"] == want["kind"], f"{where}: {got['kind']} where MXNet gives {want['kind']}"
    kind = want["kind"]
    if kind == "array":
        assert (got["dtype"], got["shape"]) == (want["dtype"], want["shape"]), \
            f"{where}: {got['dtype']} {got['shape']} where MXNet gives " \
            f"{want['dtype']} {want['shape']}"
        np.testing.assert_allclose(np.asarray(got["values"], np.float64),
                                   np.asarray(want["values"], np.float64),
                                   rtol=RTOL, atol=ATOL, err_msg=where)
    elif kind in ("list", "dict"):
        keys = range(len(want["items"])) if kind == "list" else sorted(want["items"])
        assert len(got["items"]) == len(want["items"]), \
            f"{where}: {len(got['items'])} items where MXNet gives {len(want['items'])}"
        for key in keys:
            assert_same(got["items"][key], want["items"][key], f"{where}[{key!r}]")
    elif kind == "value" and isinstance(want["value"], float) \
            and not isinstance(got["value"], (bool, str, type(None))):
        np.testing.assert_allclose(got["value"], want["value"], rtol=RTOL, atol=ATOL,
                                   err_msg=where)
    else:
        assert got == want, f"{where}: {got} where MXNet gives {want}"
