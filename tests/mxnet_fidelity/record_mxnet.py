"""Record what the real MXNet answers for the cases of ``cases.py`` (the fixture the
fidelity tests compare portable with; run it again only to refresh the fixture).

MXNet 1.9.1 needs NumPy < 1.24, so it lives in a virtual environment of its own:

    python3.9 -m venv /tmp/mxnet-1.9.1
    /tmp/mxnet-1.9.1/bin/pip install "mxnet==1.9.1" "numpy<1.24"
    /tmp/mxnet-1.9.1/bin/python tests/mxnet_fidelity/record_mxnet.py tests/mxnet_fidelity/fixtures

It writes one ``<set>.json`` per case set of ``cases.SETS``.
"""
from __future__ import annotations

import json
import os
import platform
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import SETS, SETUP  # noqa: E402


def describe(out, mx) -> dict:
    """What a case gave: arrays as dtype, shape and values; a symbol as its arguments and
    the shapes and dtypes inferred for x (2, 3) float32."""
    if isinstance(out, mx.sym.Symbol):
        _, shapes, _ = out.infer_shape(x=(2, 3))
        _, dtypes, _ = out.infer_type(x=np.float32)
        return {"kind": "symbol", "arguments": out.list_arguments(),
                "shapes": [list(s) for s in shapes],
                "dtypes": [np.dtype(d).name for d in dtypes]}
    if isinstance(out, (list, tuple)):
        return {"kind": "list", "items": [describe(item, mx) for item in out]}
    value = out.asnumpy()
    return {"kind": "array", "dtype": value.dtype.name, "shape": list(value.shape),
            "values": value.tolist()}


def main() -> None:
    import mxnet as mx

    for set_name, cases in SETS.items():
        answers = {}
        for name, code in cases.items():
            scope = {"mx": mx}
            exec(SETUP + code, scope)  # noqa: S102 - the cases are this repository's snippets
            answers[name] = describe(scope["out"], mx)
        fixture = {"recorded_with": {"mxnet": mx.__version__, "numpy": np.__version__,
                                     "python": platform.python_version()},
                   "setup": SETUP, "cases": cases, "answers": answers}
        with open(os.path.join(sys.argv[1], f"{set_name}.json"), "w") as handle:
            json.dump(fixture, handle, indent=1, sort_keys=True)
            handle.write("\n")


if __name__ == "__main__":
    main()
