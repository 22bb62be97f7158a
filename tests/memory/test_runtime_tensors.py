"""``portable memory`` on a model whose shapes depend on values: which tensors were planned,
which were planned per shape by later segments, and which were allocated at run time."""
import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from portable.cli.main import main


def _positives(path):
    nodes = [helper.make_node("Greater", ["x", "zero"], ["mask"]),
             helper.make_node("NonZero", ["mask"], ["where"]),
             helper.make_node("Transpose", ["where"], ["rows"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "rows"], ["picked"]),
             helper.make_node("Relu", ["x"], ["r"])]
    graph = helper.make_graph(
        nodes, "positives", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("picked", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [4, 3])],
        [numpy_helper.from_array(np.zeros((), np.float32), "zero")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)


def test_json_lists_planned_and_run_time_tensors(tmp_path, capsys):
    path = str(tmp_path / "positives.onnx")
    _positives(path)
    assert main(["memory", path, "--json"]) == 0
    tensors = json.loads(capsys.readouterr().out)["extra"]["tensors"]
    assert tensors["runtime"] == ["where"]
    assert {"mask", "r"} <= set(tensors["planned"])
    assert set(tensors["planned_per_shape"]) == {"rows", "picked"}


def test_table_says_what_runs_unplanned(tmp_path, capsys):
    path = str(tmp_path / "positives.onnx")
    _positives(path)
    assert main(["memory", path, "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert "allocated at run time: where" in out


def test_a_static_model_has_every_tensor_planned(capsys):
    assert main(["memory", "lenet", "--batch", "2", "--no-measure", "--json"]) == 0
    tensors = json.loads(capsys.readouterr().out)["extra"]["tensors"]
    assert tensors["runtime"] == [] and len(tensors["planned"]) > 5
