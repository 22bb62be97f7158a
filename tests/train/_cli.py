"""Run ``portable`` in a subprocess (with a timeout, so nothing can hang)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def env() -> dict:
    out = dict(os.environ)
    out["PYTHONPATH"] = str(ROOT) + os.pathsep + out.get("PYTHONPATH", "")
    out.setdefault("MPLBACKEND", "Agg")
    return out


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "portable.cli.main", *map(str, args)]


def run(*args: str, timeout: float = 240) -> tuple[dict, subprocess.CompletedProcess]:
    """Run a command that ends with ``--json``; returns (the last stdout line parsed, process)."""
    proc = subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc
