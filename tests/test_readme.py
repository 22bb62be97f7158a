"""The README's Python example runs as written."""
import pathlib
import re

import pytest


def test_readme_python_example_runs(tmp_path, monkeypatch):
    pytest.importorskip("onnx", reason="the example exports to ONNX")
    readme = pathlib.Path(__file__).resolve().parents[1] / "README.md"
    code = re.search(r"```python\n(.*?)```", readme.read_text(), re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(readme), "exec"), {})
    assert (tmp_path / "mlp.onnx").stat().st_size > 0
