"""save/load_parameters (safetensors, structural names), export / SymbolBlock.imports, and the
errors for missing, extra, mis-shaped parameters and corrupted files."""
import numpy as np
import pytest

import portable as pt
from portable.errors import MissingDependencyError, SerializationError
from portable.gluon import SymbolBlock, nn

RNG = np.random.default_rng(11)


def _net():
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(3, kernel_size=3, padding=1), nn.BatchNorm(), nn.MaxPool2D(),
                nn.Dense(5))
    return net


def _trained_net():
    net = _net()
    net.initialize(pt.init.Xavier())
    x = pt.nd.array(RNG.standard_normal((2, 2, 6, 6)).astype(np.float32))
    with pt.autograd.record():
        net(x)  # a training step updates the running statistics
    return net, x


def test_round_trip_with_structural_names(tmp_path):
    net, x = _trained_net()
    path = tmp_path / "net.params"
    net.save_parameters(str(path))
    from safetensors.numpy import load_file

    assert sorted(load_file(str(path))) == sorted(
        ["0.weight", "0.bias", "1.gamma", "1.beta", "1.running_mean", "1.running_var",
         "3.weight", "3.bias"])
    fresh = _net()  # different prefixes, shapes still unknown
    fresh.load_parameters(str(path))
    for hybridize in (False, True):
        fresh.hybridize(hybridize)
        np.testing.assert_array_equal(fresh(x).asnumpy(), net(x).asnumpy())


def test_prefixed_names_through_parameter_dict(tmp_path):
    net, x = _trained_net()
    path = tmp_path / "dict.params"
    net.collect_params().save(str(path), strip_prefix=net.prefix)
    other = _net()
    other.load_parameters(str(path))  # no structural names: prefixed loading
    np.testing.assert_array_equal(other(x).asnumpy(), net(x).asnumpy())
    again = _net()
    again.collect_params().load(str(path), restore_prefix=again.prefix)
    np.testing.assert_array_equal(again(x).asnumpy(), net(x).asnumpy())


def test_missing_extra_and_mismatched_parameters(tmp_path):
    net, _ = _trained_net()
    path = tmp_path / "net.params"
    net.save_parameters(str(path))
    bigger = _net()
    bigger.add(nn.Dense(2))
    with pytest.raises(SerializationError, match=r"missing in file .*net\.params"):
        bigger.load_parameters(str(path))
    bigger.load_parameters(str(path), allow_missing=True)
    smaller = nn.HybridSequential()
    smaller.add(nn.Conv2D(3, kernel_size=3, padding=1))
    with pytest.raises(SerializationError, match=r"does not have"):
        smaller.load_parameters(str(path))
    smaller.load_parameters(str(path), ignore_extra=True)
    wrong = _net()
    wrong[0].weight.shape = (3, 4, 3, 3)
    with pytest.raises(SerializationError, match=r"0\.weight|shape"):
        wrong.load_parameters(str(path))


def test_dtype_mismatch_needs_cast_dtype(tmp_path):
    net, x = _trained_net()
    path = tmp_path / "net.params"
    net.save_parameters(str(path))
    other = _net()
    other.cast("float64")
    with pytest.raises(SerializationError, match="dtype"):
        other.load_parameters(str(path))
    other.load_parameters(str(path), cast_dtype=True)
    assert other[3].weight.data().dtype == np.float64


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "missing"])
def test_corrupted_files_raise_serialization_error_naming_the_file(tmp_path, damage):
    net, _ = _trained_net()
    path = tmp_path / "net.params"
    net.save_parameters(str(path))
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) - 20])
    elif damage == "garbage":
        path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}" + data[20:])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()
    with pytest.raises(SerializationError, match="net.params"):
        _net().load_parameters(str(path))


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    net, _ = _trained_net()
    net.save_parameters(str(tmp_path / "a.params"))
    net.save_parameters(str(tmp_path / "a.params"))
    assert [p.name for p in tmp_path.iterdir()] == ["a.params"]


def test_export_and_symbol_block_imports(tmp_path):
    net, x = _trained_net()
    net.hybridize()
    expected = net(x).asnumpy()
    symbol_file, params_file = net.export(str(tmp_path / "model"), epoch=3)
    assert symbol_file.endswith("model-symbol.json") and params_file.endswith("model-0003.params")
    block = SymbolBlock.imports(symbol_file, ["data"], params_file)
    np.testing.assert_allclose(block(x).asnumpy(), expected, rtol=1e-6, atol=1e-6)
    aux = [n for n, p in block.collect_params().items() if p.grad_req == "null"]
    assert sorted(aux) == sorted(n for n in net.collect_params() if "running" in n)
    # a SymbolBlock is a HybridBlock: it can be a child of another block and be traced again
    outer = nn.HybridSequential()
    outer.add(block, nn.Activation("relu"))
    np.testing.assert_allclose(outer(x).asnumpy(), np.maximum(expected, 0), rtol=1e-6,
                               atol=1e-6)


def test_symbol_block_from_symbol_api_infers_parameter_shapes():
    data = pt.sym.var("data")
    out = pt.sym.FullyConnected(pt.sym.relu(pt.sym.FullyConnected(data, num_hidden=4,
                                                                  name="fc1")),
                                num_hidden=2, name="fc2")
    block = SymbolBlock(out, data)
    block.initialize(pt.init.Xavier())
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    y = block(pt.nd.array(x)).asnumpy()
    params = {k: p.data().asnumpy() for k, p in block.collect_params().items()}
    hidden = np.maximum(x @ params["fc1_weight"].T + params["fc1_bias"], 0)
    np.testing.assert_allclose(y, hidden @ params["fc2_weight"].T + params["fc2_bias"],
                               rtol=1e-5, atol=1e-6)


def test_export_onnx_and_import_back(tmp_path):
    """The ONNX model runs in onnxruntime with our outputs, and imports as a SymbolBlock."""
    pytest.importorskip("exporters.onnx", reason="the ONNX exporter is not installed")
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    net, x = _trained_net()
    path = str(tmp_path / "model.onnx")
    net.export_onnx(path, x)
    session = ort.InferenceSession(path)
    assert [i.name for i in session.get_inputs()] == ["data"]
    expected = net(x).asnumpy()
    np.testing.assert_allclose(session.run(None, {"data": x.asnumpy()})[0], expected,
                               rtol=1e-5, atol=1e-6)
    block = SymbolBlock.imports(path, ["data"])
    np.testing.assert_allclose(block(x).asnumpy(), expected, rtol=1e-5, atol=1e-6)


def test_missing_onnx_exporter_is_a_clear_error(tmp_path, monkeypatch):
    """Export goes through the core's exporter registry, so a missing exporter is our error
    naming the extra; import is the core's own reader, so it needs neither the edge nor onnx."""
    import sys

    from portable.io import exporters

    pytest.importorskip("exporters.onnx", reason="the ONNX exporter is not installed")
    net, x = _trained_net()
    path = str(tmp_path / "m.onnx")
    net.export_onnx(path, x)
    expected = net(x).asnumpy()
    monkeypatch.setattr(exporters, "exporters", {})  # nothing registered yet
    for name in ("exporters.onnx", "exporters.onnx.exporter", "onnx"):
        monkeypatch.setitem(sys.modules, name, None)  # as if they were not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'portable\[onnx\]'"):
        net.export_onnx(str(tmp_path / "other.onnx"), x)
    block = SymbolBlock.imports(path, ["data"])
    np.testing.assert_allclose(block(x).asnumpy(), expected, rtol=1e-5, atol=1e-6)