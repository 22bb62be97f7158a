"""MXNet's binary NDArray files (``mx.nd.save``/``load``, Gluon ``.params``) against files the
real MXNet 1.9.1 wrote (fixtures/ndarray_files, recorded by record_ndarray_files.py): portable
reads them to MXNet's values, writes the same bytes, loads a Gluon net's parameters by name to
MXNet's output, and refuses truncated or hostile files with SerializationError."""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

import portable as mx
from portable.errors import SerializationError
from portable.gluon import nn
from portable.gluon.parameter_dict import load_parameter_file
from portable.io import mxnet_ndarray_format as fmt

FIXTURES = Path(__file__).parent / "fixtures" / "ndarray_files"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
with np.load(FIXTURES / "values.npz", allow_pickle=False) as _npz:
    VALUES = {key: _npz[key] for key in _npz.files}
FILES = MANIFEST["files"]
READABLE = sorted(name for name, info in FILES.items() if name != "scalar.nd")


def _expected(file: str) -> list[tuple[str | None, np.ndarray]]:
    return [(row["name"], VALUES[row["key"]]) for row in FILES[file]["entries"]]


def _check_array(got: np.ndarray, want: np.ndarray, bfloat16_bits: bool = False) -> None:
    if bfloat16_bits:
        assert got.dtype.name == "bfloat16"
        got = got.view(np.uint16)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("file", READABLE)
def test_reads_mxnet_files_to_recorded_values(file):
    got = fmt.read(FIXTURES / file)
    want = _expected(file)
    assert [name for name, _ in got] == [name for name, _ in want]
    for (_, g), (_, w) in zip(got, want):
        _check_array(g, w, FILES[file].get("bfloat16_bits", False))
        assert g.flags.writeable


@pytest.mark.parametrize("file", [f for f in READABLE if f != "bfloat16.nd"])
def test_nd_load_gives_list_or_dict_of_ndarrays(file):
    loaded = mx.nd.load(str(FIXTURES / file))
    want = _expected(file)
    if FILES[file]["named"]:
        assert isinstance(loaded, dict) and list(loaded) == [n for n, _ in want]
        arrays = list(loaded.values())
    else:
        assert isinstance(loaded, list)  # an empty dict loads as an empty list, as in MXNet
        arrays = loaded
    assert len(arrays) == len(want)
    for got, (_, value) in zip(arrays, want):
        assert isinstance(got, mx.nd.NDArray)
        _check_array(got.asnumpy(), value)
    buffered = mx.nd.load_frombuffer((FIXTURES / file).read_bytes())
    assert type(buffered) is type(loaded) and len(buffered) == len(loaded)


def test_zero_d_file_is_refused_as_mxnet_refuses_it():
    # MXNet 1.x writes a 0-d array with ndim 0, which its own loader takes for "no array"
    assert FILES["scalar.nd"]["mxnet_loads"] is False
    with pytest.raises(SerializationError, match="scalar.nd.*array 0"):
        fmt.read(FIXTURES / "scalar.nd")


def _as_saved(file: str):
    arrays = [(name, mx.nd.array(value, dtype=value.dtype)) for name, value in _expected(file)]
    if FILES[file]["named"] or FILES[file].get("saved_as") == "dict":
        return dict(arrays)
    return [array for _, array in arrays]


@pytest.mark.parametrize("file", ["list.nd", "dict.nd", "empty_list.nd", "empty_dict.nd",
                                  "scalar.nd", "net.params", "net_prefixed.params",
                                  "net_export.params"])
def test_nd_save_writes_mxnet_bytes(tmp_path, file):
    target = tmp_path / file
    mx.nd.save(str(target), _as_saved(file))
    assert target.read_bytes() == (FIXTURES / file).read_bytes()


def test_single_ndarray_and_bfloat16_write_mxnet_bytes(tmp_path):
    mx.nd.save(str(tmp_path / "single.nd"), mx.nd.array(VALUES["single.nd/0"]))
    assert (tmp_path / "single.nd").read_bytes() == (FIXTURES / "single.nd").read_bytes()
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = VALUES["bfloat16.nd/0"]
    fmt.write(tmp_path / "bf.nd", {"bf": bits.view(ml_dtypes.bfloat16)})
    assert (tmp_path / "bf.nd").read_bytes() == (FIXTURES / "bfloat16.nd").read_bytes()


@pytest.mark.parametrize("case", sorted(MANIFEST["errors"]))
def test_argument_errors_are_mxnets(tmp_path, case):
    kind, message = MANIFEST["errors"][case]
    one = mx.nd.ones(2)
    call = {"tuple": lambda: mx.nd.save(str(tmp_path / "x"), (one,)),
            "int_key": lambda: mx.nd.save(str(tmp_path / "x"), {1: one}),
            "numpy_item": lambda: mx.nd.save(str(tmp_path / "x"), [np.ones(2)]),
            "numpy_value": lambda: mx.nd.save(str(tmp_path / "x"), {"a": np.ones(2)}),
            "number": lambda: mx.nd.save(str(tmp_path / "x"), 3),
            "load_number": lambda: mx.nd.load(3),
            "frombuffer_number": lambda: mx.nd.load_frombuffer(3)}[case]
    with pytest.raises({"TypeError": TypeError, "ValueError": ValueError}[kind],
                       match=re.escape(message)):
        call()
    assert not (tmp_path / "x").exists()


# -- Gluon -----------------------------------------------------------------------------------

def _net():
    net = nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(nn.Conv2D(4, 3, in_channels=2), nn.BatchNorm(in_channels=4),
                nn.Activation("relu"), nn.Dense(3, in_units=64))  # Dense flattens
    net.initialize()
    return net


def _check_net(net) -> None:
    for name, param in net._collect_params_with_prefix().items():
        want = dict(_expected("net.params"))[name]
        np.testing.assert_array_equal(param.data().asnumpy(), want)
    out = net(mx.nd.array(VALUES["net/input"])).asnumpy()
    np.testing.assert_allclose(out, VALUES["net/output"], rtol=1e-5, atol=1e-5)


def test_gluon_loads_mxnet_save_parameters_by_structural_name():
    net = _net()
    net.load_parameters(str(FIXTURES / "net.params"))
    _check_net(net)


def test_gluon_loads_prefixed_and_exported_parameters():
    net = _net()  # collect_params().save(strip_prefix="net_"): names restored with the prefix
    net.load_parameters(str(FIXTURES / "net_prefixed.params"))
    _check_net(net)
    net = _net()  # export: arg:/aux: keys with the full names
    net.collect_params().load(str(FIXTURES / "net_export.params"))
    _check_net(net)
    assert sorted(load_parameter_file(FIXTURES / "net_export.params")) == sorted(
        name for name, _ in _expected("net_export.params"))


def test_gluon_saves_mxnet_format_on_request(tmp_path):
    net = _net()
    net.load_parameters(str(FIXTURES / "net.params"))
    net.save_parameters(str(tmp_path / "net.params"), format="mxnet")
    assert (tmp_path / "net.params").read_bytes() == (FIXTURES / "net.params").read_bytes()
    net.collect_params().save(str(tmp_path / "p.params"), strip_prefix="net_", format="mxnet")
    assert (tmp_path / "p.params").read_bytes() == (
        FIXTURES / "net_prefixed.params").read_bytes()
    net.save_parameters(str(tmp_path / "default.params"))  # safetensors stays the default
    assert not fmt.is_mxnet_ndarray_file(tmp_path / "default.params")
    _check_net(_loaded(tmp_path / "default.params"))


def _loaded(path):
    net = _net()
    net.load_parameters(str(path))
    return net


def test_unnamed_list_is_no_parameter_file():
    with pytest.raises(SerializationError, match="list.nd.*unnamed"):
        load_parameter_file(FIXTURES / "list.nd")


# -- hostile files ---------------------------------------------------------------------------

def _raises_naming(path: Path, data: bytes, match: str = "") -> None:
    path.write_bytes(data)
    with pytest.raises(SerializationError, match=rf"{path.name}.*{match}"):
        fmt.read(path)


@pytest.mark.parametrize("file", ["dict.nd", "sparse.nd", "np_shape.nd", "net.params"])
def test_every_truncation_raises_naming_the_file(tmp_path, file):
    data = (FIXTURES / file).read_bytes()
    for end in range(len(data)):  # cutting the names list leaves a file still too short
        _raises_naming(tmp_path / "cut.nd", data[:end])
        with pytest.raises(SerializationError, match="<cut>"):
            fmt.read_buffer(data[:end], "<cut>")


def _one_array(*fields: bytes, names: bytes = b"\0" * 8) -> bytes:
    return struct.pack("<QQQ", fmt.LIST_MAGIC, 0, 1) + b"".join(fields) + names


def test_hostile_headers_raise_naming_file_and_array(tmp_path):
    head = struct.pack("<Ii", fmt.V2_MAGIC, 0)
    cpu_f32 = struct.pack("<iii", 1, 0, 0)
    bad = tmp_path / "bad.nd"
    _raises_naming(bad, b"not an ndarray file at all", "list magic")
    _raises_naming(bad, struct.pack("<QQQ", fmt.LIST_MAGIC, 0, 2**63), "declares")
    _raises_naming(bad, _one_array(head, struct.pack("<i", 1000)), "array 0: ndim 1000")
    _raises_naming(bad, _one_array(head, struct.pack("<i", -5)), "array 0: ndim -5")
    _raises_naming(bad, _one_array(head, struct.pack("<iqq", 2, 2**40, 2**40), cpu_f32),
                   "array 0.*needs")
    _raises_naming(bad, _one_array(head, struct.pack("<iq", 1, -3), cpu_f32), "negative")
    _raises_naming(bad, _one_array(head, struct.pack("<iq", 1, 1), struct.pack("<iii", 1, 0, 99),
                                   b"\0" * 8), "dtype flag 99")
    _raises_naming(bad, _one_array(struct.pack("<Ii", fmt.V2_MAGIC, 7)), "storage type 7")
    _raises_naming(bad, _one_array(struct.pack("<I", 0xDEADBEEF)), "bad array magic")
    good = _one_array(head, struct.pack("<iq", 1, 1), cpu_f32, b"\0" * 4, names=b"")
    _raises_naming(bad, good + struct.pack("<Q", 5), "5 names for 1 arrays")
    _raises_naming(bad, good + struct.pack("<QQ", 1, 2**60), "name 0: name length")
    _raises_naming(bad, good + struct.pack("<QQ", 1, 2) + b"\xff\xfe", "UTF-8")
    rsp = struct.pack("<Ii", fmt.V2_MAGIC, 1) + struct.pack("<iqq", 2, 0, 3)
    _raises_naming(bad, _one_array(rsp, struct.pack("<iqq", 2, 2**40, 3), cpu_f32,
                                   struct.pack("<iiq", 6, 1, 0)), "dense")
    with pytest.raises(SerializationError, match="missing.nd.*cannot read"):
        fmt.read(tmp_path / "missing.nd")


def test_flipped_bytes_never_raise_anything_else(tmp_path):
    data = bytearray((FIXTURES / "sparse.nd").read_bytes())
    rng = np.random.default_rng(0)
    for _ in range(300):
        mutated = bytearray(data)
        for at in rng.integers(0, len(data), 3):
            mutated[at] = int(rng.integers(0, 256))
        try:
            fmt.read_buffer(bytes(mutated), "<mutated>")
        except SerializationError as exc:
            assert "<mutated>" in str(exc)


def test_legacy_records_read(tmp_path):
    # the oldest layout (the ndim as magic, uint32 dims) and V1 (int64 dims, no storage type)
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    legacy = struct.pack("<III", 2, 2, 3) + struct.pack("<iii", 1, 0, 0) + value.tobytes()
    v1 = struct.pack("<Iiqq", fmt.V1_MAGIC, 2, 2, 3) + struct.pack("<iii", 1, 0, 0) \
        + value.tobytes()
    for record in (legacy, v1):
        ((name, got),) = fmt.read_buffer(_one_array(record))
        assert name is None
        np.testing.assert_array_equal(got, value)
