"""The engine configurations that every contract test runs against."""
from __future__ import annotations

import pytest

ENGINES = [
    pytest.param("naive", {}, id="naive"),
    pytest.param("threaded", {"cpu_workers": 1}, id="threaded-1worker"),
    pytest.param("threaded", {"cpu_workers": 2}, id="threaded-2workers"),
]
