"""android_demo: the digits demo runs under a phone-like memory cap with NumPy alone, its outputs
match onnxruntime's, and over-budget or corrupted models are refused with exit code 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.android_demo._lenet import lenet_models

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "android_demo"
sys.path.insert(0, str(DEMO))

# Hard address-space limit (RLIMIT_AS) of the demo process, mimicking what a phone leaves an
# app. With OPENBLAS_NUM_THREADS=1 the smallest limit under which the demo still ran here was
# 144 MiB (184 MiB with two OpenBLAS threads; `import numpy` alone needs 99 MiB: OpenBLAS
# reserves its GEMM buffers at the first matrix product, and the failure is "OpenBLAS error:
# Memory allocation still failed"), found by bisection with run_demo below. The cap adds a
# third for other builds of Python, NumPy and OpenBLAS. The demo's resident peak is ~40 MiB.
CAP_FOUND_MIB = 144
PHONE_CAP_MIB = 192
# Packages the demo must neither load nor need: the phone has none of them.
BLOCKED = ("onnx", "onnxruntime", "google", "sklearn", "scipy", "matplotlib", "safetensors",
           "tqdm", "torch", "pyopencl")
# Runs the script with an import hook that makes every BLOCKED package unimportable.
WITHOUT_EXTRAS = """
import runpy, sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"{{name}} is blocked: the phone has no such package",
                                      name=name)
sys.meta_path.insert(0, Blocker())
sys.argv = {argv!r}
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return lenet_models(tmp_path_factory)


def run_demo(script: str, *args, cap_mib: int | None = None, blocked: tuple = (),
             timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``android_demo/<script>`` in a child process, optionally under an address-space cap
    and with ``blocked`` packages unimportable."""
    argv = [str(DEMO / script), *map(str, args)]
    command = [sys.executable, "-c", WITHOUT_EXTRAS.format(blocked=blocked, argv=argv)]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (cap_mib << 20, cap_mib << 20))

    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT, preexec_fn=limit if cap_mib else None)


def _report(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _onnxruntime_outputs(model: Path, inputs: np.ndarray) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: x[None]})[0] for x in inputs])


def test_samples_are_held_out_images_standardised_as_in_training():
    from classify_digits import load_samples

    from portable.data.digits import load_digits_split

    inputs, labels, names = load_samples()
    manifest = json.loads((DEMO / "samples" / "samples.json").read_text())
    split = load_digits_split()  # what `portable train --dataset digits` trains and tests on
    index = [entry["test_index"] for entry in manifest["samples"]]
    assert names == [entry["file"] for entry in manifest["samples"]] and len(names) == 30
    np.testing.assert_array_equal(inputs, split.x_test[index])
    np.testing.assert_array_equal(labels, split.y_test[index])
    assert sorted(set(labels.tolist())) == list(range(10))


def test_pgm_reader_reads_plain_and_binary_images(tmp_path):
    from classify_digits import read_pgm

    from portable.errors import SerializationError

    pixels = np.arange(12).reshape(3, 4) % 17
    text = " ".join(map(str, pixels.ravel()))
    (tmp_path / "plain.pgm").write_text(f"P2\n# a comment\n4 3\n16\n{text}\n")
    (tmp_path / "raw.pgm").write_bytes(b"P5 4 3 16\n" + pixels.astype(np.uint8).tobytes())
    (tmp_path / "bad.pgm").write_text("P2\n4 x\n16\n")
    for name in ("plain.pgm", "raw.pgm"):
        image, maxval = read_pgm(tmp_path / name)
        np.testing.assert_array_equal(image, pixels)
        assert maxval == 16
    with pytest.raises(SerializationError, match="bad.pgm"):
        read_pgm(tmp_path / "bad.pgm")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS caps need Linux")
@pytest.mark.parametrize("fmt", ["portable", "onnx"])
def test_demo_under_a_phone_memory_cap_with_numpy_alone_matches_onnxruntime(
        models, fmt, tmp_path):
    out = tmp_path / "outputs.npz"
    proc = run_demo("classify_digits.py", "--model", models[fmt], "--json", "--outputs", out,
                    cap_mib=PHONE_CAP_MIB, blocked=BLOCKED)
    report = _report(proc)
    with np.load(out, allow_pickle=False) as saved:
        inputs, labels = saved["inputs"], saved["labels"]
        (scores,) = [saved[k] for k in saved.files if k.startswith("outputs/")]
    expected = _onnxruntime_outputs(models["onnx"], inputs)
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)
    assert [row["predicted"] for row in report["samples"]] == expected.argmax(1).tolist()
    assert [row["label"] for row in report["samples"]] == labels.tolist()
    assert report["accuracy"] >= 0.8 and report["device"] == "cpu(0)"
    assert not set(BLOCKED) & set(report["modules"]), report["modules"]
    memory = report["memory"]
    assert 0 < memory["total_bytes"] <= memory["budget_bytes"] == 64 << 20
    assert 0 < report["peak_resident_bytes"] < PHONE_CAP_MIB << 20
    if fmt == "portable":  # the weights are read straight from the mapped file
        assert memory["mapped_weights_bytes"] == memory["weights_bytes"] > 0


def test_text_output_lists_every_sample_and_the_summary(models):
    proc = run_demo("classify_digits.py", "--model", models["portable"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    rows = [line.split() for line in lines if line.split()[:1] and
            line.split()[0].endswith(".pgm")]
    assert len(rows) == 30 and all(row[0].endswith(f"label{row[1]}.pgm") for row in rows)
    assert any(line.startswith("accuracy ") and "median latency" in line for line in lines)
    assert any(line.startswith("peak resident memory") and "planned" in line for line in lines)


def test_over_budget_model_is_refused_before_it_runs(models):
    proc = run_demo("classify_digits.py", "--model", models["portable"], "--memory-budget",
                    "1k", blocked=BLOCKED)
    assert proc.returncode == 2, proc.stderr[-3000:]
    message = proc.stderr
    for word in ("lenet.portable", "plan", "weights", "budget", "1.0 KiB"):
        assert word in message, message
    assert "Traceback" not in message and proc.stdout == ""


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])  # inside the last tensor's bytes


@pytest.mark.parametrize("fmt, damage", [("portable", _flip_last_byte),
                                         ("portable", lambda data: data[:len(data) // 2]),
                                         ("onnx", lambda data: data[:len(data) // 2])],
                         ids=["flipped-byte", "truncated", "truncated-onnx"])
def test_corrupted_model_is_refused_with_a_clear_error(models, tmp_path, fmt, damage):
    broken = tmp_path / f"broken.{fmt}"
    broken.write_bytes(damage(models[fmt].read_bytes()))
    proc = run_demo("classify_digits.py", "--model", broken, blocked=BLOCKED)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "broken." + fmt in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_device_report_says_what_portable_will_use():
    from portable.device import available_devices

    report = _report(run_demo("device_report.py", "--json"))
    assert report["numpy"]["version"] == np.__version__
    assert report["system"]["cpu_count"] == os.cpu_count()
    assert report["memory"]["MemTotal"] > 0
    assert set(report["portable"]["devices"]) == {str(d) for d, _ in available_devices()}
    opencl = report["opencl"]
    assert opencl["available"] == (not report["portable"]["devices"]["opencl(0)"]
                                   .startswith("unavailable"))
    if opencl["available"]:
        assert all(d["compute_units"] > 0 and d["global_memory_bytes"] > 0
                   for d in opencl["devices"])
    else:
        assert "pyopencl" in opencl["how_to_get_it"]
    assert report["portable"]["demo_device"]["auto"] == \
        ("opencl" if opencl["available"] else "cpu")


def test_demo_on_opencl_matches_onnxruntime(models, tmp_path):
    from portable.device import opencl
    from portable.errors import BackendError

    try:
        opencl().backend
    except BackendError as exc:
        pytest.skip(f"no OpenCL device here: {exc}")
    out = tmp_path / "outputs.npz"
    report = _report(run_demo("classify_digits.py", "--model", models["portable"], "--device",
                              "opencl", "--json", "--outputs", out, timeout=300))
    assert report["device"] == "opencl(0)"
    with np.load(out, allow_pickle=False) as saved:
        inputs = saved["inputs"]
        (scores,) = [saved[k] for k in saved.files if k.startswith("outputs/")]
    np.testing.assert_allclose(scores, _onnxruntime_outputs(models["onnx"], inputs),
                               rtol=1e-4, atol=1e-4)
