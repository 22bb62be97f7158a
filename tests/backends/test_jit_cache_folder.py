"""numba's disk cache for the compiled tier sits in a folder named by a digest of the
package's sources (``backends/numpy/jit.cache_folder``): numba keys a cached loop by its own
file only, so a loop that inlines one from another module would keep that module's old code
after an upgrade changed it. A changed module gives a new folder; a user's
``NUMBA_CACHE_DIR`` is left alone."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from backends.numpy import jit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(not jit.available(),
                                reason="numba is not installed (pip install 'portable[jit]')")


def test_the_folder_changes_with_any_module_of_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTABLE_CACHE_DIR", str(tmp_path / "cache"))
    package = tmp_path / "package"
    package.mkdir()
    (package / "a.py").write_text("A = 1\n")
    (package / "b.py").write_text("B = 1\n")
    first = jit.cache_folder(package)
    assert first.parent == tmp_path / "cache" / "numba"
    assert jit.cache_folder(package) == first
    (package / "b.py").write_text("B = 2\n")  # (a module the loops of a.py might inline)
    assert jit.cache_folder(package) != first


RUN = r"""
import os, numpy as np
from backends.numpy.jit import max_pool_forward as max_pool
x = np.zeros((1, 1, 4, 4), np.float32)
max_pool.max_pool_pairs(x, np.empty((1, 1, 2, 2), np.float32))
print(os.environ["NUMBA_CACHE_DIR"])
"""


def _run(env_overrides):
    env = {key: value for key, value in os.environ.items() if key != "NUMBA_CACHE_DIR"}
    env.update(env_overrides, PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", RUN], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_loops_are_cached_in_that_folder(tmp_path):
    folder = _run({"PORTABLE_CACHE_DIR": str(tmp_path)})
    assert folder == str(tmp_path / "numba" / jit.cache_folder().name)
    written = [name for _, _, names in os.walk(folder) for name in names]
    assert any(name.startswith("max_pool_forward.max_pool_pairs") and name.endswith(".nbi")
               for name in written), written


def test_a_users_numba_cache_dir_is_kept(tmp_path):
    mine = str(tmp_path / "mine")
    assert _run({"PORTABLE_CACHE_DIR": str(tmp_path), "NUMBA_CACHE_DIR": mine}) == mine
    assert not (tmp_path / "numba").exists()
