"""`portable export` both ways (ONNX -> deployment -> ONNX), checked against onnxruntime on the
original model; `portable train --export X.portable`; and clear errors."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from portable.cli.main import main

onnx = pytest.importorskip("onnx", reason="the export command's ONNX side needs onnx")

from tests.exporters.helpers import (assert_light_outputs, light_input,  # noqa: E402
                                    light_models, ort_run, with_logits)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _export(capsys, *args):
    code = main(["export", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured


def _run_deployment(path, feeds):
    from exporters.onnx.backend import PortableRep
    from portable.device import cpu
    from portable.predict import deployment

    return PortableRep(deployment.load(path), cpu()).run(feeds)


def test_onnx_to_deployment_to_onnx_matches_onnxruntime(tmp_path, capsys):
    light = next(p for p in light_models() if p.endswith("light_squeezenet.onnx"))
    source = tmp_path / "light_squeezenet.onnx"  # with its logits as a second output
    onnx.save(with_logits(onnx.load(light)), str(source))
    name, x = light_input(onnx.load(str(source)))
    want = ort_run(str(source), {name: x})

    deployed = tmp_path / "squeezenet.portable"
    code, out = _export(capsys, source, "-o", deployed, "--json")
    assert code == 0, out.err
    report = json.loads(out.out)
    assert report["format"] == "portable" and report["path"] == str(deployed)
    assert report["bytes"] == os.path.getsize(deployed) and report["tensors"] > 0
    assert_light_outputs(_run_deployment(deployed, {name: x}), want, rtol=1e-4, atol=1e-6)

    back = tmp_path / "squeezenet.onnx"
    code, out = _export(capsys, deployed, "-o", back, "--opset", "17", "--json")
    assert code == 0, out.err
    report = json.loads(out.out)
    assert report["format"] == "onnx" and report["opset"] == 17
    model = onnx.load(str(back))
    onnx.checker.check_model(model)
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 17
    assert_light_outputs(ort_run(str(back), {name: x}), want, rtol=1e-4, atol=1e-6)


def test_format_flag_overrides_the_suffix_and_text_output_names_the_file(tmp_path, capsys):
    source = next(p for p in light_models() if p.endswith("light_zfnet512.onnx"))
    target = tmp_path / "model.bin"
    code, out = _export(capsys, source, "-o", target, "--format", "portable")
    assert code == 0, out.err
    assert out.out.startswith(f"wrote {target} (portable)") and "tensors" in out.out
    from portable.predict import deployment

    about = deployment.describe(target)
    assert about["metadata"]["source"] == "light_zfnet512.onnx"
    copy = tmp_path / "copy.portable"  # deployment -> deployment keeps the metadata
    code, out = _export(capsys, target, "-o", copy, "--json")
    assert code == 0, out.err
    assert deployment.describe(copy)["metadata"]["source"] == "model.bin"


@pytest.mark.parametrize("args, message", [
    (["{src}", "-o", "{tmp}/m.portable", "--opset", "17"], "--opset applies to ONNX output"),
    (["{tmp}/missing.onnx", "-o", "{tmp}/m.portable"], "cannot read model .*missing.onnx"),
    (["{src}", "-o", "{src}", "--format", "onnx"], "would overwrite its source"),
    (["{tmp}/bad.portable", "-o", "{tmp}/m.onnx"], "bad.portable: truncated"),
])
def test_errors_are_clear(tmp_path, capsys, args, message):
    import re

    source = next(p for p in light_models() if p.endswith("light_zfnet512.onnx"))
    (tmp_path / "bad.portable").write_bytes((1000).to_bytes(8, "little") + b'{"__metadata__"')
    args = [a.format(src=source, tmp=tmp_path) for a in args]
    code, out = _export(capsys, *args)
    assert code == 2 and re.search(message, out.err), out.err
    assert not (tmp_path / "m.portable").exists() and not (tmp_path / "m.onnx").exists()


# `portable train` in a process where onnx and onnxruntime cannot be imported
_WITHOUT_ONNX = ("import sys; sys.modules['onnx'] = sys.modules['onnxruntime'] = None; "
                 "from portable.cli.main import main; sys.exit(main(sys.argv[1:]))")


def test_train_exports_the_deployment_format_without_onnx(tmp_path):
    """`portable train --export X.portable` (a subprocess, as users run it, here with no onnx
    importable: the traced graph is written directly): the file classifies the test digits,
    at any batch size the Predictor is given, as well as training reported."""
    from portable.data.vision import load_arrays
    from portable.predict import Predictor, deployment

    target = tmp_path / "mlp.portable"
    env = dict(os.environ, MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_ONNX, "train", "--model", "mlp",
                           "--epochs", "2", "--no-progress", "--json", "--out", str(tmp_path),
                           "--export", str(target)], capture_output=True, text=True,
                          timeout=240, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["paths"]["deployment"] == str(target)
    about = deployment.describe(target)
    assert about["metadata"]["model"] == "mlp" and about["metadata"]["classes"] == 10
    split = load_arrays("digits")
    whole = Predictor(target, batch_size=len(split.y_test)).predict(split.x_test)[0]
    one = Predictor(target, batch_size=1)
    assert [one.predict(split.x_test[i:i + 1])[0].argmax() for i in range(0, 60, 20)] == \
        list(whole.argmax(1)[0:60:20])
    assert np.mean(whole.argmax(1) == split.y_test) == pytest.approx(
        summary["test_accuracy"], abs=1.5 / len(split.y_test))
