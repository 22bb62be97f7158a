"""The tutorial scripts of ``tutorials/``, as each framework runs them.

Every script is an MXNet 1.x script whose only change is the import (``import portable as mx``,
``from portable import ...``); ``as_mxnet`` turns it back into the original for the real MXNet.
A script's result is the JSON object on the last line it prints.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

FOLDER = Path(__file__).parent / "tutorials"
SCRIPTS = sorted(path.stem for path in FOLDER.glob("t[0-9][0-9]_*.py"))
_IMPORT = re.compile(r"^(import|from) portable\b", re.MULTILINE)
_SEED = re.compile(r"mx\.random\.seed\(\d+\)")
# The seeds each accuracy is also recorded at: MXNet's own spread over them sets the bar.
SEEDS = (0, 1, 2, 3, 4)


def source(name: str) -> str:
    return (FOLDER / f"{name}.py").read_text()


def fingerprint(name: str) -> str:
    """Which version of the script a recorded result belongs to."""
    return hashlib.sha256(source(name).encode()).hexdigest()


def is_seeded(text: str) -> bool:
    """Whether the script draws its initial weights from ``mx.random.seed(...)``."""
    return bool(_SEED.search(text))


def with_seed(text: str, seed: int) -> str:
    """The script with its ``mx.random.seed(...)`` set to ``seed``."""
    return _SEED.sub(f"mx.random.seed({seed})", text)


def as_mxnet(text: str) -> str:
    """The script as it was written for MXNet: ``portable`` imports become ``mxnet`` ones."""
    return _IMPORT.sub(lambda match: f"{match.group(1)} mxnet", text)


def run(script: Path, python: str = sys.executable, timeout: float = 600) -> dict:
    """Run ``script`` (its folder holds ``digits_data.py``) and return its result."""
    done = subprocess.run([python, script.name], cwd=script.parent, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
