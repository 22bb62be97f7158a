"""MXNet 1.9.1's model files (symbol JSON + binary .params) load in portable and give MXNet's
recorded answers, and convert to ONNX that onnxruntime runs to the same answers.

The fixtures (``fixtures/model_files/``) were written by the real MXNet with
``record_model_files.py``: a Gluon LeNet and a quarter-width ResNet-18 (``export``), a Module
checkpoint (``save_checkpoint``), and ``ops.json``, small graphs of one MXNet op each.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import portable as mx
from portable.errors import SerializationError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "model_files")
MODELS = {"lenet": ["data"], "resnet18": ["data"], "mlp": ["data", "softmax_label"]}
TOLERANCE = 1e-4


def _files(name: str) -> tuple[str, str]:
    prefix = os.path.join(FIXTURES, name)
    return f"{prefix}-symbol.json", f"{prefix}-0000.params"


def _io(name: str) -> tuple[np.ndarray, np.ndarray]:
    prefix = os.path.join(FIXTURES, name)
    return (np.load(f"{prefix}-input.npy", allow_pickle=False),
            np.load(f"{prefix}-output.npy", allow_pickle=False))


def _feeds(name: str, x: np.ndarray) -> list:
    feeds = [mx.nd.array(x)]
    if "softmax_label" in MODELS[name]:
        feeds.append(mx.nd.zeros((x.shape[0],)))  # SoftmaxOutput's forward ignores it
    return feeds


@pytest.mark.parametrize("name", sorted(MODELS))
def test_symbol_matches_mxnet_facts(name):
    symbol = mx.sym.load(_files(name)[0])
    with open(os.path.join(FIXTURES, f"{name}-facts.json")) as handle:
        facts = json.load(handle)
    assert symbol.list_arguments() == facts["arguments"]
    assert symbol.list_auxiliary_states() == facts["auxiliary_states"]
    assert symbol.list_outputs() == facts["outputs"]
    args, outs, aux = symbol.infer_shape(**facts["input_shapes"])
    assert [list(s) for s in args] == facts["arg_shapes"]
    assert [list(s) for s in outs] == facts["out_shapes"]
    assert [list(s) for s in aux] == facts["aux_shapes"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_symbol_block_imports_gives_mxnet_output(name):
    symbol_file, params_file = _files(name)
    block = mx.gluon.SymbolBlock.imports(symbol_file, MODELS[name], params_file)
    x, expected = _io(name)
    out = block(*_feeds(name, x)).asnumpy()
    assert out.shape == expected.shape and out.dtype == expected.dtype
    assert np.abs(out - expected).max() <= TOLERANCE


def test_fromjson_and_load_json_read_mxnet_text():
    with open(_files("lenet")[0]) as handle:
        text = handle.read()
    for read in (mx.sym.fromjson, mx.sym.load_json):
        assert read(text).list_outputs() == ["hybridsequential0_dense2_fwd_output"]
    # portable's own format still round-trips what was read from MXNet's
    again = mx.sym.fromjson(mx.sym.fromjson(text).tojson())
    assert again.list_arguments() == mx.sym.fromjson(text).list_arguments()


def test_fix_gamma_ignores_the_stored_gamma():
    """The Module checkpoint's gamma is not 1; MXNet's default fix_gamma=True ignores it, and
    the recorded output is what that gives (a model using gamma would differ)."""
    symbol_file, params_file = _files("mlp")
    block = mx.gluon.SymbolBlock.imports(symbol_file, MODELS["mlp"], params_file)
    gamma = block.collect_params()["bn1_gamma"].data().asnumpy()
    assert np.abs(gamma - 1).max() > 0.1


# -- one MXNet op at a time ------------------------------------------------------------------

with open(os.path.join(FIXTURES, "ops.json")) as _handle:
    OP_CASES = json.load(_handle)


@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_op_matches_mxnet(case):
    record = OP_CASES[case]
    symbol = mx.sym.fromjson(record["symbol"], source=f"ops.json:{case}")
    args = {k: mx.nd.array(np.asarray(v, np.float32)) for k, v in record["inputs"].items()}
    aux = {k: mx.nd.array(np.asarray(v, np.float32)) for k, v in record["aux"].items()}
    outputs = symbol.bind(mx.cpu(), args, grad_req="null", aux_states=aux).forward()
    assert len(outputs) == len(record["outputs"])
    for out, expected, dtype, shape in zip(outputs, record["outputs"], record["dtypes"],
                                           record["shapes"]):
        out = out.asnumpy()
        assert list(out.shape) == shape and out.dtype.name == dtype
        tolerance = 2e-3 if dtype == "float16" else TOLERANCE
        np.testing.assert_allclose(out.astype(np.float64), np.asarray(expected).reshape(shape),
                                   atol=tolerance, rtol=tolerance)


# -- ONNX ------------------------------------------------------------------------------------


def _onnxruntime_output(path: str, x: np.ndarray) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def test_resnet18_exports_to_onnx_through_the_api(tmp_path):
    pytest.importorskip("onnx", reason="onnx is not installed")
    symbol_file, params_file = _files("resnet18")
    block = mx.gluon.SymbolBlock.imports(symbol_file, ["data"], params_file)
    x, expected = _io("resnet18")
    path = str(tmp_path / "resnet18.onnx")
    block.export_onnx(path, mx.nd.array(x))
    assert np.abs(_onnxruntime_output(path, x) - expected).max() <= TOLERANCE


def test_resnet18_exports_to_onnx_through_the_cli(tmp_path, capsys):
    pytest.importorskip("onnx", reason="onnx is not installed")
    from portable.cli.main import main

    x, expected = _io("resnet18")
    path = str(tmp_path / "resnet18.onnx")
    shape = ",".join(str(d) for d in x.shape)
    assert main(["export", _files("resnet18")[0], "--input", f"data:{shape}", "-o", path,
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["params"].endswith("resnet18-0000.params")  # found beside the JSON
    assert np.abs(_onnxruntime_output(path, x) - expected).max() <= TOLERANCE


def test_module_checkpoint_with_softmax_output_exports_to_onnx(tmp_path):
    """MXNet's Module checkpoint ends in SoftmaxOutput, whose label only its gradient reads: the
    export needs only the data's shape, and onnxruntime gives MXNet's recorded probabilities."""
    pytest.importorskip("onnx", reason="onnx is not installed")
    from portable.cli.main import main

    x, expected = _io("mlp")
    path = str(tmp_path / "mlp.onnx")
    shape = ",".join(str(d) for d in x.shape)
    assert main(["export", _files("mlp")[0], "--input", f"data:{shape}", "-o", path]) == 0
    assert np.abs(_onnxruntime_output(path, x) - expected).max() <= TOLERANCE


def test_cli_needs_the_input_shapes(tmp_path, capsys):
    from portable.cli.main import main

    assert main(["export", _files("lenet")[0], "-o", str(tmp_path / "l.onnx")]) == 2
    assert "--input data:" in capsys.readouterr().err


# -- hostile files ---------------------------------------------------------------------------

def _variable(name):
    return {"op": "null", "name": name, "inputs": []}


HOSTILE = {
    "forward_input": ({"nodes": [{"op": "relu", "name": "r", "inputs": [[1, 0, 0]]},
                                 _variable("x")], "heads": [[0, 0, 0]]},
                      ["node 'r'", "node #1", "does not come before"]),
    "unknown_op": ({"nodes": [_variable("x"),
                              {"op": "_contrib_Frobnicate", "name": "frob",
                               "inputs": [[0, 0, 0]]}], "heads": [[1, 0, 0]]},
                   ["node 'frob'", "_contrib_Frobnicate"]),
    "huge_num_outputs": ({"nodes": [_variable("x"),
                                    {"op": "SliceChannel", "name": "cut",
                                     "attrs": {"num_outputs": "1000000000"},
                                     "inputs": [[0, 0, 0]]}], "heads": [[1, 0, 0]]},
                         ["node 'cut'", "num_outputs=1000000000"]),
    "nodes_not_a_list": ({"nodes": {"0": _variable("x")}, "heads": [[0, 0, 0]]},
                         ["\"nodes\" must be a list"]),
    "node_not_an_object": ({"nodes": [_variable("x"), 7], "heads": [[0, 0, 0]]},
                           ["nodes[1]"]),
    "head_out_of_range": ({"nodes": [_variable("x")], "heads": [[5, 0, 0]]},
                          ["heads[0]", "node #5"]),
    "output_out_of_range": ({"nodes": [_variable("x"),
                                       {"op": "relu", "name": "r", "inputs": [[0, 3, 0]]}],
                             "heads": [[1, 0, 0]]}, ["node 'r'", "output 3"]),
    "bad_attribute": ({"nodes": [_variable("x"), _variable("w"), _variable("b"),
                                 {"op": "Convolution", "name": "conv",
                                  "attrs": {"kernel": "(3, 3)", "num_filter": "many"},
                                  "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]}],
                       "heads": [[3, 0, 0]]},
                      ["node 'conv'", "Convolution", "num_filter"]),
    "missing_input": ({"nodes": [_variable("x"),
                                 {"op": "elemwise_add", "name": "add", "inputs": [[0, 0, 0]]}],
                       "heads": [[1, 0, 0]]}, ["node 'add'", "1 inputs"]),
    "bad_entry": ({"nodes": [_variable("x"), {"op": "relu", "name": "r", "inputs": [["0"]]}],
                   "heads": [[1, 0, 0]]}, ["node 'r'", "[node, output, version]"]),
    "duplicate_name": ({"nodes": [_variable("x"), _variable("x")], "heads": [[1, 0, 0]]},
                       ["node 'x'", "used twice"]),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_json_names_the_file_and_node(case, tmp_path):
    document, expected = HOSTILE[case]
    path = tmp_path / f"{case}-symbol.json"
    path.write_text(json.dumps(document))
    with pytest.raises(SerializationError) as info:
        mx.sym.load(str(path))
    message = str(info.value)
    assert str(path) in message
    for part in expected:
        assert part in message, message
