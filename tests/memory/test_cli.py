"""``portable memory``: the table, --json keys, --plot, and clear errors."""
import json
import os
import subprocess
import sys

import pytest

from portable.cli.main import main

KEYS = ("naive_bytes", "inplace_bytes", "coshare_bytes", "planned_bytes", "lower_bound_bytes",
        "measured_peak_bytes", "weights_bytes")


def test_json_has_the_documented_keys(capsys):
    assert main(["memory", "lenet", "--batch", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in KEYS:
        assert isinstance(data[key], int), key
    assert data["naive_bytes"] >= data["planned_bytes"] >= data["lower_bound_bytes"] > 0
    assert data["batch"] == 4 and not data["train"]


def test_table_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot draws with matplotlib")
    path = tmp_path / "timeline.png"
    assert main(["memory", "mlp", "--train", "--batch", "8", "--plot", str(path)]) == 0
    out = capsys.readouterr().out
    for row in ("naive", "in-place only", "co-share only", "both", "liveness lower bound",
                "optimizer_state", "measured peak"):
        assert row in out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mirror_reports_its_saving(capsys):
    assert main(["memory", "lenet", "--train", "--mirror", "--batch", "16", "--no-measure",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["measured_peak_bytes"] is None
    mirror = data["extra"]["mirror"]
    assert mirror["recomputed_nodes"] > 0 and "saved_bytes" in mirror


def test_an_onnx_file(capsys):
    onnx = pytest.importorskip("onnx", reason="the light models ship inside onnx")
    pytest.importorskip("exporters.onnx", reason="loading ONNX needs exporters.onnx")
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_squeezenet.onnx")
    assert main(["memory", path, "--batch", "2", "--no-measure", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["planned_bytes"] == data["lower_bound_bytes"]


def test_bad_input_gives_a_clear_error(capsys):
    assert main(["memory", "no_such_model"]) == 2
    assert "unknown model 'no_such_model'" in capsys.readouterr().err
    assert main(["memory", "missing/model.onnx"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["memory", "mlp", "--mirror"]) == 2
    assert "needs --train" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # checked while parsing, as argparse exits
        main(["memory", "mlp", "--batch", "0"])
    assert refused.value.code == 2
    assert "--batch: must be a positive integer" in capsys.readouterr().err


def test_the_command_runs_as_a_program():
    out = subprocess.run([sys.executable, "-m", "portable.cli.main", "memory", "mlp",
                          "--no-measure", "--json"], capture_output=True, text=True,
                         timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["planned_bytes"] > 0
