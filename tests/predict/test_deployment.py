"""The deployment format: imported ONNX models (the nine light models, a LeNet exported by our
exporter) survive save/load structurally and run like onnxruntime runs the ONNX file; the tensors
read with NumPy alone equal what ``safetensors`` reads and are read-only views of the mapped
file; every kind of damage is refused naming the file (and tensor) and leaves the file as is;
the read path imports neither safetensors nor onnx."""
import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from portable.errors import BindError, SerializationError
from portable.ir.graph import Graph, Node, TensorType
from portable.predict import deployment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _small_graph() -> Graph:
    """y = Relu(x @ w + b) + c, with b and c of equal size (for the overlap case)."""
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((3, 4)).astype(np.float32),
               "b": rng.standard_normal(4).astype(np.float32),
               "c": rng.standard_normal(4).astype(np.float32),
               "steps": np.array(5, np.int64)}
    nodes = (Node("Gemm", ("x", "w", "b"), ("h",), {}, "fc"),
             Node("Relu", ("h",), ("r",), {}, "relu"),
             Node("Add", ("r", "c"), ("y",), {}, "add"))
    return Graph(nodes=nodes, inputs=(("x", TensorType((None, 3), "float32")),),
                 outputs=("y", "steps"), initializers=weights, name="small")


def _same_structure(got: Graph, want: Graph) -> None:
    assert got.name == want.name and got.inputs == want.inputs and got.outputs == want.outputs
    assert got.nodes == want.nodes
    assert sorted(got.initializers) == sorted(want.initializers)
    for name, array in want.initializers.items():
        mine = got.initializers[name]
        assert mine.dtype == array.dtype and mine.shape == array.shape
        np.testing.assert_array_equal(mine, array)


def test_save_load_round_trip_and_closed_form(tmp_path):
    graph = _small_graph()
    info = deployment.save(graph, tmp_path / "m.portable", metadata={"classes": 4})
    assert info["tensors"] == 4 and info["bytes"] == os.path.getsize(tmp_path / "m.portable")
    loaded = deployment.load(tmp_path / "m.portable")
    _same_structure(loaded, graph)
    from portable.device import cpu
    from portable.executor.compiled import CompiledGraph

    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    plan = CompiledGraph(loaded, cpu(), {"x": TensorType((2, 3), "float32")})
    y, steps = plan.run({"x": x})
    w, b, c = (graph.initializers[k] for k in "wbc")
    np.testing.assert_allclose(y, np.maximum(x @ w + b, 0) + c, rtol=1e-6)
    assert int(steps) == 5
    about = deployment.describe(tmp_path / "m.portable")
    assert about["metadata"] == {"classes": 4} and about["tensors"] == 4
    assert about["inputs"] == ["x"] and about["nodes"] == 3 and about["version"] == "1"


def test_tensors_are_read_only_views_of_the_mapped_file(tmp_path):
    deployment.save(_small_graph(), tmp_path / "m.portable")
    loaded = deployment.load(tmp_path / "m.portable")
    for name, array in loaded.initializers.items():
        assert not array.flags.owndata and not array.flags.writeable, name
        assert deployment.is_mapped(array), name
        assert array.ctypes.data % array.dtype.itemsize == 0, name  # aligned to its item size
        with pytest.raises(ValueError):
            array[...] = 0
    assert not deployment.is_mapped(np.zeros(3))


def test_numpy_reader_matches_safetensors(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="safetensors is the "
                                            "reference reader")
    graph = _small_graph()
    extra = {"h16": np.arange(6, dtype=np.float16).reshape(2, 3),
             "u8": np.arange(3, dtype=np.uint8), "flag": np.array([True, False]),
             "i32": np.array([[-3]], np.int32),
             "empty": np.zeros((0, 2), np.float32), "f64": np.array(np.pi)}
    nodes = graph.nodes + tuple(Node("Identity", (name,), (f"{name}_out",), {}, f"id_{name}")
                                for name in extra)
    graph = graph.replace(nodes=nodes, initializers={**graph.initializers, **extra},
                          outputs=graph.outputs + tuple(f"{n}_out" for n in extra))
    path = tmp_path / "m.portable"
    deployment.save(graph, path)
    theirs = safetensors_numpy.load_file(str(path))
    mine = deployment.load(path).initializers
    assert sorted(theirs) == sorted(mine)
    for name, array in theirs.items():
        assert mine[name].dtype == array.dtype and mine[name].shape == array.shape, name
        np.testing.assert_array_equal(mine[name], array)


def test_params_become_initializers(tmp_path):
    graph = _small_graph()
    weights = dict(graph.initializers)
    params = {"w": weights.pop("w"), "b": weights.pop("b")}
    as_inputs = graph.replace(inputs=graph.inputs + (("w", TensorType((3, 4))),
                                                     ("b", TensorType((4,)))),
                              initializers=weights)
    deployment.save(as_inputs, tmp_path / "m.portable", params)
    loaded = deployment.load(tmp_path / "m.portable")
    assert loaded.input_names == ("x",)
    _same_structure(loaded, graph)
    with pytest.raises(BindError, match="parameter 'v' is not a graph input"):
        deployment.save(as_inputs, tmp_path / "bad.portable", {"v": params["w"]})
    with pytest.raises(BindError, match="parameter 'w' is float32\\[4x3\\]"):
        deployment.save(as_inputs, tmp_path / "bad.portable", {"w": params["w"].T})
    assert not (tmp_path / "bad.portable").exists()


def test_failed_save_leaves_the_old_file(tmp_path):
    path = tmp_path / "m.portable"
    deployment.save(_small_graph(), path)
    before = path.read_bytes()
    bad = _small_graph().replace(initializers={**_small_graph().initializers,
                                               "z": np.zeros(2, np.complex64)})
    with pytest.raises(SerializationError, match="tensor 'z' has dtype complex64"):
        deployment.save(bad, path)
    with pytest.raises(SerializationError, match="metadata is not JSON-able"):
        deployment.save(_small_graph(), path, metadata={"f": object()})
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.portable"]  # no temporary left behind


# -- damage ---------------------------------------------------------------------------------

def _parts(data: bytes) -> tuple[dict, bytes]:
    length = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + length]), data[8 + length:]


def _assemble(header: dict, body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + body


def _rewrite(change):
    """A corruption that edits the decoded header (and keeps the graph checksum consistent, so
    the check under test is the one that fires)."""
    def corrupt(data: bytes) -> bytes:
        header, body = _parts(data)
        body = change(header, body) or body
        meta = header.get("__metadata__", {})
        if "graph" in meta:
            meta["graph_crc32"] = str(zlib.crc32(meta["graph"].encode()))
        return _assemble(header, body)
    return corrupt


def _set_graph(edit):
    def change(header, body):
        doc = json.loads(header["__metadata__"]["graph"])
        edit(doc)
        header["__metadata__"]["graph"] = json.dumps(doc)
    return change


def _flip_tensor_byte(name):
    def corrupt(data: bytes) -> bytes:
        header, _ = _parts(data)
        start = 8 + int.from_bytes(data[:8], "little")
        at = start + header[name]["data_offsets"][0] + 1
        return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1:]
    return corrupt


def _drop(key):
    def change(header, body):
        del header[key]
    return change


def _entry(name, **fields):
    def change(header, body):
        header[name].update(fields)
    return change


def _meta(**fields):
    def change(header, body):
        header["__metadata__"].update(fields)
    return change


def _overlap(header, body):
    header["c"]["data_offsets"] = list(header["b"]["data_offsets"])


DAMAGE = {
    "too short": (lambda d: d[:6], "too short to be a deployment file \\(6 bytes\\)"),
    "header length absurd": (lambda d: (1 << 40).to_bytes(8, "little") + d[8:],
                             "header length 1099511627776 is absurd"),
    "header beyond the file": (lambda d: d[:200], "truncated: the header needs"),
    "header not JSON": (lambda d: d[:8] + b"{\"__meta" + b"\xff" + d[17:],
                        "the header is not valid JSON"),
    "header not an object": (lambda d: _assemble([1], b""), "the header is not a JSON object"),
    "duplicate header key": (lambda d: _rewrite(lambda h, b: None)(d).replace(
        b'"b": {', b'"c": {', 1), "the header is not valid JSON.*'c' appears twice"),
    "format tag": (_rewrite(_meta(format="safetensors")), "not a portable deployment file"),
    "no metadata": (_rewrite(lambda h, b: h.pop("__metadata__") and None),
                    "not a portable deployment file"),
    "version": (_rewrite(_meta(version="2")), "deployment format version '2' is not supported"),
    "offsets beyond the data": (_rewrite(_entry("w", data_offsets=[0, 4096])),
                                "tensor 'w': data_offsets \\[0, 4096\\] lie outside"),
    "offsets not a pair": (_rewrite(_entry("w", data_offsets=[0])),
                           "tensor 'w': data_offsets \\[0\\] is not a pair"),
    "overlapping tensors": (_rewrite(_overlap), "tensors 'b' and 'c' overlap"),
    "unknown dtype": (_rewrite(_entry("w", dtype="Q8")), "tensor 'w': unknown dtype 'Q8'"),
    "shape and size disagree": (_rewrite(_entry("w", shape=[4, 4])),
                                "tensor 'w': shape \\[4, 4\\] of F32 needs 64 bytes but "
                                "data_offsets \\[\\d+, \\d+\\] hold 48"),
    "bad shape": (_rewrite(_entry("w", shape=[3, -4])), "tensor 'w': shape \\[3, -4\\]"),
    "tensor bytes flipped": (_flip_tensor_byte("c"), "tensor 'c' is corrupted: its crc32 is"),
    "truncated tensor data": (lambda d: d[:-8], "lie outside the \\d+ bytes of tensor data"),
    "crc missing": (_rewrite(_meta(crc32="{}")), "tensor '(b|c|w|steps)' has no crc32"),
    "graph bytes flipped": (lambda d: d.replace(b'Relu', b'Relv', 1), "the graph is corrupted"),
    "graph not JSON": (_rewrite(_meta(graph="{\"nodes\": [")), "the graph is not valid JSON"),
    "graph node unreadable": (_rewrite(_set_graph(lambda g: g["nodes"][1].pop("outputs"))),
                              "node 'relu': field \"outputs\" is missing"),
    "initializer missing": (_rewrite(_drop("c")), "\\['c'\\] that the graph needs are missing"),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_damage_is_refused_naming_the_file_and_leaves_it_as_is(tmp_path, case):
    corrupt, pattern = DAMAGE[case]
    good = tmp_path / "good.portable"
    deployment.save(_small_graph(), good)
    path = tmp_path / "model.portable"
    damaged = corrupt(good.read_bytes())
    path.write_bytes(damaged)
    os.chmod(path, 0o444)  # any write attempt would fail loudly
    with pytest.raises(SerializationError, match=pattern) as info:
        deployment.load(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == damaged


def test_unreadable_file_is_a_serialization_error(tmp_path):
    with pytest.raises(SerializationError, match="cannot read deployment file .*missing.portable"):
        deployment.load(tmp_path / "missing.portable")


# -- sniffing -------------------------------------------------------------------------------

def test_sniffing_tells_deployment_files_from_onnx(tmp_path):
    from tests.exporters.helpers import light_models

    deployment.save(_small_graph(), tmp_path / "m.portable")
    head = (tmp_path / "m.portable").read_bytes()[:deployment.SNIFF_BYTES]
    assert deployment.is_deployment(head)
    assert b'"format":"portable.deployment"' in head
    for path in light_models():
        with open(path, "rb") as handle:
            assert not deployment.is_deployment(handle.read(deployment.SNIFF_BYTES)), path
    assert not deployment.is_deployment(b"")
    assert not deployment.is_deployment(b"\x08\x07\x12\x07pytorch\x1a\x052.0.0")


def test_a_foreign_safetensors_file_is_claimed_and_refused_clearly(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="writes the foreign file")
    path = tmp_path / "weights.safetensors"
    safetensors_numpy.save_file({"w": np.ones(3, np.float32)}, str(path))
    assert deployment.is_deployment(path.read_bytes()[:deployment.SNIFF_BYTES])
    with pytest.raises(SerializationError, match="weights.safetensors: not a portable "
                                                 "deployment file.*portable export"):
        deployment.load(path)


def test_the_read_path_imports_neither_safetensors_nor_onnx(tmp_path):
    path = tmp_path / "m.portable"
    deployment.save(_small_graph(), path)
    code = ("import sys, portable.predict.deployment as d; g = d.load(sys.argv[1]); "
            "assert g.nodes; print(' '.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, check=True)
    loaded = set(out.stdout.split())
    assert not {m for m in loaded if m.split(".")[0] in ("safetensors", "onnx", "onnxruntime")}


# -- real models against onnxruntime --------------------------------------------------------

def _import(path):
    pytest.importorskip("onnx", reason="importing ONNX models needs the onnx package")
    from portable.io.onnx.importer import import_graph

    return import_graph(path, params_as_inputs=False)[0]


def _light(name):
    from tests.exporters.helpers import light_models

    return next(p for p in light_models() if os.path.basename(p) == f"light_{name}.onnx")


def _light_ids():
    try:
        from tests.exporters.helpers import light_models
    except pytest.skip.Exception:
        return []
    return [os.path.basename(p)[6:-5] for p in light_models()]


@pytest.mark.parametrize("name", _light_ids())
def test_light_model_round_trips_and_runs_like_onnxruntime(tmp_path, name):
    from tests.exporters.helpers import (assert_light_outputs, light_input, onnx, ort_run,
                                        with_logits)

    from exporters.onnx.backend import PortableRep
    from portable.device import cpu

    onnx_path = str(tmp_path / f"{name}.onnx")  # with its logits as a second output
    onnx.save(with_logits(onnx.load(_light(name))), onnx_path)
    graph = _import(onnx_path)
    deployment.save(graph, tmp_path / "m.portable")
    loaded = deployment.load(tmp_path / "m.portable")
    _same_structure(loaded, graph)
    assert all(deployment.is_mapped(a) for a in loaded.initializers.values() if a.size)
    input_name, x = light_input(onnx.load(onnx_path))
    want = ort_run(onnx_path, {input_name: x})
    got = PortableRep(loaded, cpu()).run({input_name: x})
    assert_light_outputs(got, want, rtol=1e-4, atol=1e-6)


def test_lenet_exported_by_portable_runs_like_onnxruntime(tmp_path):
    from tests.exporters.helpers import ort_run

    import portable as pt
    from portable.io.onnx.importer import import_graph
    from exporters.onnx.backend import PortableRep
    from portable.models.zoo import get_model

    pt.random.seed(0)
    net = get_model("lenet", num_classes=10)
    net.initialize(pt.init.Xavier(magnitude=2.0))
    x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
    net(pt.nd.array(x))  # shapes of the deferred parameters
    onnx_path = str(tmp_path / "lenet.onnx")
    net.export_onnx(onnx_path, pt.nd.array(x))
    graph, params = import_graph(onnx_path)  # weights as parameters: save folds them back in
    assert params
    deployment.save(graph, tmp_path / "lenet.portable", params)
    loaded = deployment.load(tmp_path / "lenet.portable")
    assert set(params) <= set(loaded.initializers)
    (want,) = ort_run(onnx_path, {loaded.input_names[0]: x})
    (got,) = PortableRep(loaded, pt.cpu()).run([x])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
