"""Record what the real MXNet 1.9.1 reaches on each tutorial script (the fixture
``fixtures/tutorials.json`` that ``test_tutorials.py`` holds portable to).

    /tmp/mxnet-1.9.1/bin/pip install "mxnet==1.9.1" "numpy<1.24" "scikit-learn<1.4"
    /tmp/mxnet-1.9.1/bin/python tests/mxnet_fidelity/record_tutorials.py [script names]

Each script runs as written for MXNet (``import mxnet as mx``) in a scratch folder; a script
that reports an accuracy and seeds its weights with ``mx.random.seed`` also runs at each seed of
``SEEDS``, recording how far MXNet's own accuracy moves between seeds.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tutorial_scripts import (FOLDER, SCRIPTS, SEEDS, as_mxnet, fingerprint,  # noqa: E402
                              is_seeded, run, source, with_seed)

FIXTURE = Path(__file__).parent / "fixtures" / "tutorials.json"


def main() -> None:
    import mxnet as mx
    import numpy as np

    fixture = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {"scripts": {}}
    fixture["recorded_with"] = {"mxnet": mx.__version__, "numpy": np.__version__,
                                "python": platform.python_version()}
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copy(FOLDER / "digits_data.py", scratch)
        for name in sys.argv[1:] or SCRIPTS:
            script = Path(scratch) / f"{name}.py"
            script.write_text(as_mxnet(source(name)))
            result = run(script)
            record = {"sha256": fingerprint(name), "metrics": result}
            if "accuracy" in result and is_seeded(source(name)):
                record["accuracy_by_seed"] = {}
                for seed in SEEDS:
                    script.write_text(as_mxnet(with_seed(source(name), seed)))
                    record["accuracy_by_seed"][str(seed)] = run(script)["accuracy"]
            fixture["scripts"][name] = record
            print(name, record)
    FIXTURE.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
