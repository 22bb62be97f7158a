"""String tensors (ONNX STRING: object arrays of str): read from ONNX files, fed as NumPy str
arrays, kept out of the memory plan's byte arena, and refused by name where a backend cannot
hold them."""
import numpy as np
import pytest

from portable.device import cpu
from portable.dtypes import FILE_DTYPES, from_onnx, to_onnx
from portable.errors import BackendError
from portable.executor.compiled import CompiledGraph
from portable.ir import GraphBuilder
from portable.passes.plan_memory import ALIGNMENT, plan_memory


def _words(*values):
    array = np.empty(len(values), dtype=object)
    array[:] = list(values)
    return array


def _concat_graph():
    b = GraphBuilder("concat")
    x = b.input("x", (2,), object)
    suffix = b.const(_words("!", "?"), name="suffix")
    joined = b.op("StringConcat", x, suffix)
    again = b.op("StringConcat", joined, joined)
    same = b.op("Equal", again, b.const(_words("a!a!", "b?b?"), name="expected"))
    return b.build([again, same])


def test_string_is_onnx_element_type_8_but_never_a_file_dtype():
    assert to_onnx(np.dtype(object)) == 8 and from_onnx(8) == np.dtype(object)
    assert "object" not in FILE_DTYPES  # no loader builds object arrays from bytes


def test_strings_live_outside_the_arena_and_kernels_write_into_their_own_arrays():
    graph = _concat_graph()
    plan = plan_memory(graph)
    assert set(plan.offsets) == {graph.outputs[1]}  # only Equal's bool output is placed
    assert plan.arena_bytes == ALIGNMENT  # (its 2 bytes, aligned)
    compiled = CompiledGraph(graph, cpu())
    doubled, same = compiled.run({"x": _words("a", "b")})
    np.testing.assert_array_equal(doubled, _words("a!a!", "b?b?"))
    np.testing.assert_array_equal(same, [True, True])


def test_onnx_string_initializer_and_str_feed():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from exporters.onnx import backend

    prefix = helper.make_tensor("prefix", TensorProto.STRING, [2], [b"pre-", "\u00e9-".encode()])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("StringConcat", ["prefix", "x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, [2])], [prefix]),
        opset_imports=[helper.make_opsetid("", 20)])
    onnx.checker.check_model(model)
    y, = backend.prepare(model).run([np.array(["one", "two"])])  # a NumPy str_ array
    assert y.dtype == object
    assert y.tolist() == ["pre-one", "\u00e9-two"]


def test_opencl_refuses_a_string_tensor_by_name():
    try:
        device = pytest.importorskip("portable").opencl()
        device.backend
    except Exception as exc:  # no OpenCL platform here
        pytest.skip(f"OpenCL is not available: {exc}")
    with pytest.raises(BackendError, match="tensor 'x' is a string tensor") as caught:
        CompiledGraph(_concat_graph(), device)
    assert "opencl" in str(caught.value)
