"""Paths read from files stay in their folder, only regular files are read, and sizes are
checked before reading (portable/io/files.py), for the module itself and for the loaders that
name files inside files: ONNX external data and checkpoint manifests."""
import json
import os
import threading

import numpy as np
import pytest

from portable.errors import SerializationError
from portable.io import files

onnx = pytest.importorskip("onnx", reason="the external-data cases are written with onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from portable.io.onnx import wire  # noqa: E402

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")


def _write(path, data: bytes):
    with open(path, "wb") as handle:
        handle.write(data)
    return str(path)


# -- the module ------------------------------------------------------------------------------


@pytest.mark.parametrize("relative", ["/etc/passwd", "../outside.bin", "a/../../outside.bin",
                                      "", ".", "w\x00.bin", "\\\\server\\share"])
def test_paths_that_leave_the_folder_are_refused(tmp_path, relative):
    (tmp_path / "a").mkdir()
    with pytest.raises(SerializationError, match="inside|not a relative file name"):
        files.resolve_inside(tmp_path / "a", relative, "location")


def test_a_link_to_a_file_elsewhere_is_refused(tmp_path):
    secret = _write(tmp_path / "secret.bin", b"elsewhere")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    os.symlink(secret, model_dir / "w.bin")
    with pytest.raises(SerializationError, match="resolves to .*secret.bin"):
        files.resolve_inside(model_dir, "w.bin", "location")


def test_a_linked_folder_elsewhere_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _write(elsewhere / "w.bin", b"x")
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    os.symlink(elsewhere, model_dir / "data")
    with pytest.raises(SerializationError, match="inside"):
        files.resolve_inside(model_dir, "data/w.bin", "location")


def test_links_that_stay_inside_are_followed(tmp_path):
    (tmp_path / "data").mkdir()
    real = _write(tmp_path / "data" / "w.bin", b"abc")
    os.symlink("data/w.bin", tmp_path / "alias.bin")
    assert files.resolve_inside(tmp_path, "alias.bin", "location") == os.path.realpath(real)


@needs_fifo
def test_a_named_pipe_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    outcome = {}

    def read():
        try:
            files.read_bytes(fifo, "external data file", limit=1 << 20)
        except SerializationError as exc:
            outcome["error"] = str(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading a named pipe blocked"
    assert "named pipe" in outcome["error"]


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_a_device_is_refused_before_reading():
    with pytest.raises(SerializationError, match="character device"):
        files.read_bytes("/dev/zero", "checkpoint file", limit=1 << 20)
    with pytest.raises(SerializationError, match="character device"):
        files.map_bytes("/dev/zero", "external data file")


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(SerializationError, match="a folder"):
        files.read_bytes(tmp_path, "checkpoint file", limit=10)


def test_the_size_is_checked_before_reading(tmp_path):
    path = _write(tmp_path / "big.bin", b"x" * 1000)
    with pytest.raises(SerializationError, match="1000 bytes, more than the 999-byte limit"):
        files.read_bytes(path, "checkpoint file", limit=999)
    assert files.read_bytes(path, "checkpoint file", limit=1000) == b"x" * 1000


def test_text_must_be_utf8(tmp_path):
    path = _write(tmp_path / "m.json", b"\xff\xfe{}")
    with pytest.raises(SerializationError, match="not UTF-8"):
        files.read_text(path, "symbol file")


# -- ONNX external data ----------------------------------------------------------------------


def _external_model(folder, location: str) -> str:
    """A model y = Relu(w) whose 4-float initializer w lives in the external file
    ``location`` (written by the test, never by portable)."""
    weight = numpy_helper.from_array(np.arange(4, dtype=np.float32) - 1, "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Relu", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
                              [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return _write(os.path.join(folder, "m.onnx"), model.SerializeToString())


def test_external_data_inside_the_folder_loads(tmp_path):
    _write(tmp_path / "w.bin", (np.arange(4, dtype=np.float32) - 1).tobytes())
    parsed, _ = wire.load_model(_external_model(tmp_path, "w.bin"))
    assert bytes(parsed.graph.initializer[0].raw_data) == \
        (np.arange(4, dtype=np.float32) - 1).tobytes()


def test_external_data_linked_elsewhere_is_refused(tmp_path):
    """The attack of the review: w.bin in the model's folder links to a file elsewhere, and
    the model's output would be that file's bytes."""
    secret = _write(tmp_path / "secret", b"S" * 16)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    os.symlink(secret, model_dir / "w.bin")
    with pytest.raises(SerializationError, match="tensor 'w'.*external data location"):
        wire.load_model(_external_model(model_dir, "w.bin"))


@pytest.mark.parametrize("location", ["/etc/hostname", "../secret", "w\x00.bin"])
def test_external_data_locations_outside_are_refused(tmp_path, location):
    with pytest.raises(SerializationError, match="tensor 'w'"):
        wire.load_model(_external_model(tmp_path, location))


@needs_fifo
def test_external_data_in_a_named_pipe_is_refused(tmp_path):
    os.mkfifo(tmp_path / "w.bin")
    with pytest.raises(SerializationError, match="named pipe"):
        wire.load_model(_external_model(tmp_path, "w.bin"))


# -- checkpoint manifests --------------------------------------------------------------------


def _checkpoint(folder):
    from portable.checkpoint import CheckpointManager
    from portable.io.tensors import tensors_to_bytes

    manager = CheckpointManager(folder)
    path = manager.save({"w": np.ones(3, np.float32)}, tensors_to_bytes({}),
                        {"epoch": 1, "step": 2})
    return manager, path


@pytest.mark.parametrize("replacement", ["/dev/zero", "../elsewhere.safetensors",
                                         "/etc/passwd"])
def test_a_manifest_path_outside_its_folder_is_refused(tmp_path, replacement):
    manager, path = _checkpoint(tmp_path / "run")
    manifest = json.loads(path.read_text())
    manifest["files"]["params"]["path"] = replacement
    path.write_text(json.dumps(manifest))
    with pytest.raises(SerializationError, match="params file.*inside"):
        manager.load(path)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_a_manifest_path_linked_to_a_device_is_refused_before_reading(tmp_path):
    manager, path = _checkpoint(tmp_path / "run")
    params = tmp_path / "run" / json.loads(path.read_text())["files"]["params"]["path"]
    params.unlink()
    os.symlink("/dev/zero", params)  # a link inside the folder, to a device outside it
    with pytest.raises(SerializationError, match="inside"):
        manager.load(path)


def test_a_manifest_that_understates_the_size_is_refused_before_reading(tmp_path):
    manager, path = _checkpoint(tmp_path / "run")
    manifest = json.loads(path.read_text())
    manifest["files"]["params"]["bytes"] = 10
    path.write_text(json.dumps(manifest))
    with pytest.raises(SerializationError, match="more than the 10-byte limit"):
        manager.load(path)
