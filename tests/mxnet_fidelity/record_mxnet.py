"""Record what the real MXNet answers for the cases of ``cases.py`` (the fixture the
fidelity tests compare portable with; run it again only to refresh the fixture).

MXNet 1.9.1 needs NumPy < 1.24, so it lives in a virtual environment of its own:

    python3.9 -m venv /tmp/mxnet-1.9.1
    /tmp/mxnet-1.9.1/bin/pip install "mxnet==1.9.1" "numpy<1.24"
    /tmp/mxnet-1.9.1/bin/python tests/mxnet_fidelity/record_mxnet.py tests/mxnet_fidelity/fixtures

It writes one ``<set>.json`` per case set of ``cases.SETS``, or only for the sets named after
the folder.
"""
from __future__ import annotations

import json
import os
import platform
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from answers import describe  # noqa: E402
from cases import SETS, SETUPS  # noqa: E402


def main() -> None:
    import mxnet as mx

    wanted = sys.argv[2:] or sorted(SETS)
    for set_name in wanted:
        cases, answers = SETS[set_name], {}
        for name, code in cases.items():
            scope = {"mx": mx}
            exec(SETUPS[set_name] + code, scope)  # noqa: S102 - the cases are this repository's snippets
            answers[name] = describe(scope["out"], mx)
        fixture = {"recorded_with": {"mxnet": mx.__version__, "numpy": np.__version__,
                                     "python": platform.python_version()},
                   "setup": SETUPS[set_name], "cases": cases, "answers": answers}
        with open(os.path.join(sys.argv[1], f"{set_name}.json"), "w") as handle:
            json.dump(fixture, handle, indent=1, sort_keys=True)
            handle.write("\n")


if __name__ == "__main__":
    main()
