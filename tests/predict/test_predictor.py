"""The Predictor: ONNX files read without the onnx package, outputs equal to PyTorch's and
onnxruntime's, memory figures that add up, a budget that refuses before running, corrupted
files refused naming the file."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from portable.errors import BindError, MemoryBudgetError, SerializationError
from portable.predict import Predictor, parse_size

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_DIR = os.path.join(ROOT, "tests", "exporters", "data", "torch")
TORCH_MODELS = sorted(glob.glob(os.path.join(TORCH_DIR, "*.onnx")))

# Runs in a child whose imports of these packages fail, as on a phone that has only NumPy.
BLOCKED = ("onnx", "onnxruntime", "google", "safetensors", "torch", "sklearn", "matplotlib")
_CHILD = """
import importlib.abc, json, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is blocked in this test")
sys.meta_path.insert(0, Block())
import numpy as np
from portable.predict import Predictor
results = {{}}
for path in {paths!r}:
    data = np.load(path[:-len(".onnx")] + ".npz")
    predictor = Predictor(path, batch_size=data["x"].shape[0])
    got, = predictor.predict(data["x"])
    results[path] = float(np.max(np.abs(got - data["y"]) / (1e-4 + np.abs(data["y"]))))
print(json.dumps({{"errors": results, "modules": sorted(sys.modules)}}))
"""


def test_import_portable_predict_loads_no_onnx():
    code = ("import sys, portable.predict; print(sorted(m for m in sys.modules if "
            "m.split('.')[0] in ('onnx', 'onnxruntime', 'google', 'safetensors', 'exporters')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


def test_pytorch_exported_models_run_without_onnx_installed():
    """The ONNX files PyTorch wrote (``tests/exporters/torch_fixtures.py``) run in a process
    that cannot import onnx, protobuf or onnxruntime, and give PyTorch's outputs."""
    assert len(TORCH_MODELS) >= 7
    code = _CHILD.format(blocked=BLOCKED, paths=TORCH_MODELS)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    for path, error in report["errors"].items():
        assert error < 1e-3, f"{os.path.basename(path)}: relative error {error}"
    assert not [m for m in report["modules"] if m.split(".")[0] in BLOCKED]


@pytest.mark.parametrize("name", ["squeezenet", "bvlc_alexnet", "shufflenet"])
def test_light_models_match_onnxruntime(name, tmp_path):
    from tests.exporters.helpers import (assert_light_outputs, light_input, light_models, onnx,
                                        ort_run, with_logits)

    light = next(p for p in light_models() if p.endswith(f"light_{name}.onnx"))
    path = str(tmp_path / f"{name}.onnx")  # with its logits as a second output
    onnx.save(with_logits(onnx.load(light)), path)
    input_name, x = light_input(onnx.load(path))
    got = Predictor(path).predict(x)
    assert_light_outputs(got, ort_run(path, {input_name: x}), rtol=1e-4, atol=1e-5)


def test_memory_figures_add_up_and_a_budget_refuses_before_running():
    path = os.path.join(TORCH_DIR, "cnn.onnx")
    memory = Predictor(path).memory
    assert memory["total_bytes"] == memory["plan_bytes"] + memory["weights_bytes"] + \
        memory["io_bytes"]
    # the CNN's weights: conv 1->8 3x3, conv 8->16 3x3, linear 784->10, with biases
    assert memory["weights_bytes"] >= 4 * (8 * 9 + 8 + 16 * 8 * 9 + 16 + 784 * 10 + 10)
    assert memory["io_bytes"] == 4 * 28 * 28
    fits = Predictor(path, memory_budget=memory["total_bytes"])
    assert fits.memory["budget_bytes"] == memory["total_bytes"]
    with pytest.raises(MemoryBudgetError) as info:
        Predictor(path, memory_budget=memory["total_bytes"] - 1)
    message = str(info.value)
    assert "cnn.onnx" in message and "plan" in message and "weights" in message
    assert "memory budget" in message


def test_budget_sizes_parse_like_people_write_them():
    assert parse_size("64MB") == 64 << 20
    assert parse_size("1.5GiB") == 3 << 29
    assert parse_size("512k") == 512 << 10
    assert parse_size(1000) == 1000


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupted_onnx_files_are_refused_naming_the_file(tmp_path, damage):
    with open(os.path.join(TORCH_DIR, "mlp.onnx"), "rb") as handle:
        data = handle.read()
    bad = {"truncate": data[:len(data) // 2], "garbage": b"\x08\x07" + b"\xff" * 64,
           "empty": b""}[damage]
    path = tmp_path / "broken.onnx"
    path.write_bytes(bad)
    with pytest.raises(SerializationError, match="broken.onnx"):
        Predictor(str(path))
    assert path.read_bytes() == bad  # left as it was


def test_wrong_inputs_are_refused_naming_the_input():
    predictor = Predictor(os.path.join(TORCH_DIR, "mlp.onnx"), batch_size=2)
    assert predictor.input_types["x"].shape == (2, 20)
    with pytest.raises(BindError, match="'x'.*shape"):
        predictor.predict(np.zeros((3, 20), np.float32))
    with pytest.raises(BindError, match="dtype"):
        predictor.predict(np.zeros((2, 20), np.int64))
    # a float64 array is converted, as a convenience
    out, = predictor.predict(np.zeros((2, 20)))
    assert out.shape == (2, 10) and out.dtype == np.float32
