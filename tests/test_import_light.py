"""`import portable` must stay light: no optional heavy dependency at import time."""
import subprocess
import sys

HEAVY = ("onnx", "onnxruntime", "pyopencl", "mpi4py", "cupy", "torch", "sklearn",
         "matplotlib", "safetensors")


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return set(out.stdout.split())


def test_import_portable_loads_no_optional_dependency():
    loaded = _modules_after("import portable")
    assert not [m for m in HEAVY if m in loaded]


def test_symbol_api_loads_no_optional_dependency():
    loaded = _modules_after("import portable; portable.sym.var('x'); portable.nd.zeros((2,))")
    assert not [m for m in HEAVY if m in loaded]


def test_no_pickle_in_the_package():
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    pattern = re.compile(r"\bimport pickle\b|\bpickle\.(load|dump)|allow_pickle\s*=\s*True|"
                         r"\bcloudpickle\b|\bdill\b")
    offenders = [str(p) for folder in ("portable", "backends", "exporters")
                 for p in (root / folder).rglob("*.py") if pattern.search(p.read_text())]
    assert not offenders
