"""The fuzzer's inputs for benchmarks/fuzz_readers.py: the files it starts from and how it
changes them.

Seeds are valid files built here (ONNX models made with the ``onnx`` helpers, deployment files
written by ``deployment.save``, tensor files by ``tensor_file_bytes``), one list per target.
Mutations turn one input into another: byte-level edits, and structure-aware ones (protobuf
fields of an ONNX model; the JSON header of a safetensors file, and the graph JSON inside a
deployment file, whose crc32 is then fixed so that mutants get past the checksum to the graph
reader). They live apart from the driver so that it holds only the running of targets and the
engines (atheris' custom mutator and the hypothesis programs both call ``mutate``).
"""
from __future__ import annotations

import json
import os
import random
import tempfile
import zlib
from typing import Any

import numpy as np

MAX_LEN = 1 << 14  # 10x the largest seed: room to grow, small enough to run fast
# Values that tend to sit on the edge of a check.
INTS = [0, 1, 2, 3, -1, -2, 7, 8, 64, 255, 256, 65535, 2 ** 31 - 1, 2 ** 31, 2 ** 32,
        2 ** 62, 2 ** 63 - 1, 2 ** 63, 2 ** 64, -(2 ** 63), 10 ** 6, 10 ** 9, 10 ** 12]
FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-45, 3.4e38, 1e308, float("inf"), float("-inf"),
          float("nan")]
STRINGS = ["", "x", "Conv", "Relu", "Gemm", "Constant", "Loop", "If", "Frobnicate", "ai.onnx",
           "portable", "float32", "F32", "I64", "__tensor__", "__metadata__", "\udc80",
           "\x00", "a" * 300, "..", "../etc/passwd", "1", "null"]


# -- seeds ------------------------------------------------------------------------------------


def onnx_seeds() -> list[bytes]:
    """Valid ONNX models: Conv/Relu/Gemm (raw_data initializers), MatMul/Add/Reshape with
    initializers in the typed fields (float_data, int64_data), and Constant nodes whose values
    are attribute tensors."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def raw(name, shape):
        return numpy_helper.from_array(rng.normal(size=shape).astype(np.float32), name)

    conv = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Flatten", ["p"], ["f"], axis=1),
         helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)], "conv_relu_gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [raw("w", (2, 1, 3, 3)), raw("b", (2,)), raw("fw", (3, 8)), raw("fb", (3,))])
    typed = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]),
         helper.make_node("Add", ["m", "b"], ["a"]),
         helper.make_node("Reshape", ["a", "shape"], ["s"]),
         helper.make_node("Softmax", ["s"], ["y"], axis=-1)], "typed_fields",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 3], rng.normal(size=12).tolist()),
         helper.make_tensor("b", TensorProto.FLOAT, [3], [0.1, 0.2, 0.3]),
         helper.make_tensor("shape", TensorProto.INT64, [2], [2, -1])])
    constants = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(
            np.arange(6, dtype=np.float32).reshape(2, 3), "kv")),
         helper.make_node("Constant", [], ["axes"], value_ints=[0]),
         helper.make_node("Constant", [], ["half"], value_float=0.5),
         helper.make_node("Add", ["x", "k"], ["a"]),
         helper.make_node("Mul", ["a", "half"], ["m"]),
         helper.make_node("ReduceSum", ["m", "axes"], ["y"], keepdims=1)], "constants",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    models = []
    for graph, opset in ((conv, 17), (typed, 13), (constants, 13)):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="fuzz_readers")
        model.ir_version = 8
        models.append(model.SerializeToString())
    return models


def deployment_seeds(models: list[bytes]) -> list[bytes]:
    """Deployment files written by ``deployment.save`` from the ONNX seeds (parameters folded
    in as initializers, and with every initializer kept a constant)."""
    from portable.io.onnx.importer import import_graph
    from portable.predict import deployment

    seeds = []
    with tempfile.TemporaryDirectory() as folder:
        for index, model in enumerate(models):
            for as_inputs in (True, False):
                graph, params = import_graph(model, params_as_inputs=as_inputs)
                path = os.path.join(folder, f"seed{index}{int(as_inputs)}.portable")
                deployment.save(graph, path, params, metadata={"seed": index, "note": "fuzz"})
                with open(path, "rb") as handle:
                    data = handle.read()
                if data not in seeds:  # with no parameter to fold, both files are alike
                    seeds.append(data)
    return seeds


def tensor_seeds() -> list[bytes]:
    """safetensors files: several dtypes and string metadata; a verified (digest) file."""
    from portable.io.tensors import tensor_file_bytes, tensors_to_bytes

    arrays = {"f32": np.arange(6, dtype=np.float32).reshape(2, 3),
              "i64": np.array([1, -2, 3], np.int64), "u8": np.arange(5, dtype=np.uint8),
              "flag": np.array([True, False]), "half": np.ones((2, 2), np.float16),
              "empty": np.zeros((0, 3), np.float32), "scalar": np.array(2.5, np.float64)}
    return [tensor_file_bytes(arrays, {"k": "v", "format": "x"}),
            tensors_to_bytes({"w": np.ones((3, 2), np.float32), "s": np.array(7, np.int32)},
                             {"step": 3, "nested": {"a": [1, 2]}}),
            tensor_file_bytes({})]


def all_seeds(target: str) -> list[bytes]:
    if target == "onnx":
        return onnx_seeds()
    if target == "deployment":
        return deployment_seeds(onnx_seeds())
    return tensor_seeds()



# -- mutations --------------------------------------------------------------------------------


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    data = bytearray(data or b"\0")
    kind, position = rng.randrange(6), rng.randrange(len(data))
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del data[position:]
    elif kind == 2:
        data[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == 3:
        del data[position:position + rng.randint(1, 32)]
    elif kind == 4:
        data[position:position] = data[position:position + rng.randint(1, 64)]
    else:
        width = rng.choice((1, 2, 4, 8))
        value = rng.choice(INTS) % (1 << (8 * width))
        data[position:position + width] = value.to_bytes(width, "little")
    return bytes(data[:MAX_LEN])


def _field_value(field, rng: random.Random, strings: list[str]) -> Any:
    kind = field.cpp_type
    if kind in (field.CPPTYPE_INT32, field.CPPTYPE_INT64, field.CPPTYPE_UINT32,
                field.CPPTYPE_UINT64, field.CPPTYPE_ENUM):
        bits = 32 if kind in (field.CPPTYPE_INT32, field.CPPTYPE_UINT32, field.CPPTYPE_ENUM) \
            else 64
        value = rng.choice(INTS + [rng.randint(-20, 40)])
        if kind in (field.CPPTYPE_UINT32, field.CPPTYPE_UINT64):
            return value % (1 << bits)
        return (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))
    if kind in (field.CPPTYPE_FLOAT, field.CPPTYPE_DOUBLE):
        return rng.choice(FLOATS)
    if kind == field.CPPTYPE_BOOL:
        return rng.random() < 0.5
    if field.type == field.TYPE_BYTES:
        return bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 3, 4, 8, 17, 64))))
    return rng.choice(strings + STRINGS).encode("utf-8", "replace").decode("utf-8", "replace")


def _repeated(field) -> bool:
    flag = getattr(field, "is_repeated", None)  # protobuf >= 5; older ones only have label
    return bool(flag) if flag is not None else field.label == field.LABEL_REPEATED


def mutate_proto(data: bytes, rng: random.Random) -> bytes | None:
    """A field-level mutation of a serialized ONNX model (None when it does not parse): set a
    scalar to an edge value or a name found elsewhere in the model, add, drop or copy an
    element of a repeated field, clear or create a sub-message."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        model = onnx.ModelProto.FromString(data)
    except (DecodeError, RuntimeError, ValueError):
        return None
    messages, strings = [], []

    def walk(message) -> None:
        messages.append(message)
        for field, value in message.ListFields():
            items = value if _repeated(field) else [value]
            if field.type == field.TYPE_MESSAGE:
                for item in items:
                    walk(item)
            elif field.type == field.TYPE_STRING:
                strings.extend(item if isinstance(item, str) else
                               bytes(item).decode("utf-8", "replace") for item in items)

    walk(model)
    for _ in range(rng.randint(1, 3)):
        message = rng.choice(messages)
        field = rng.choice(message.DESCRIPTOR.fields)
        try:
            if _repeated(field):
                items = getattr(message, field.name)
                op = rng.randrange(4)
                if op == 0 and len(items):
                    del items[rng.randrange(len(items))]
                elif field.type == field.TYPE_MESSAGE:
                    added = items.add()
                    if op != 3 and len(items) > 1:
                        added.CopyFrom(items[rng.randrange(len(items) - 1)])
                elif op == 1 or not len(items):
                    items.append(_field_value(field, rng, strings))
                else:
                    items[rng.randrange(len(items))] = _field_value(field, rng, strings)
            elif field.type == field.TYPE_MESSAGE:
                if rng.random() < 0.5:
                    message.ClearField(field.name)
                else:
                    getattr(message, field.name).SetInParent()
            else:
                setattr(message, field.name, _field_value(field, rng, strings))
        except (TypeError, ValueError):
            continue  # a value the field cannot hold (an enum number proto2 refuses)
    try:
        return model.SerializeToString()[:MAX_LEN]
    except Exception:  # noqa: BLE001: the protobuf runtime refuses some of its own states
        return None


def _split_tensor_file(data: bytes) -> tuple[dict, bytes] | None:
    if len(data) < 10:
        return None
    length = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8:8 + length].decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return (header, data[8 + length:]) if isinstance(header, dict) else None


def _join_tensor_file(header: dict, body: bytes, deep: int = 0) -> bytes:
    text = json.dumps(header, separators=(",", ":"))
    if deep:  # nesting json.dumps itself cannot write: spliced into the text
        text = text.replace('"@@DEEP@@"', "[" * deep + "]" * deep, 1)
    raw = text.encode("utf-8", "surrogatepass")
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw + body


def _mutate_json(doc: Any, rng: random.Random) -> tuple[Any, int]:
    """One edit of a JSON tree: replace, delete, duplicate or add a value. Returns the tree
    and how deep a nesting to splice in for the "@@DEEP@@" marker (0: none)."""
    slots = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in list(node):
                slots.append((node, key))
                walk(node[key])
        elif isinstance(node, list):
            for index in range(len(node)):
                slots.append((node, index))
                walk(node[index])

    walk(doc)
    if not slots:
        return rng.choice([{}, [], 0, "x"]), 0
    container, key = rng.choice(slots)
    old = container[key]
    deep = 0
    op = rng.randrange(8)
    if op == 0 and isinstance(container, dict):
        del container[key]
    elif op == 1 and isinstance(container, list):
        container.insert(key, container[key])
    elif op == 2 and isinstance(container, dict):
        container[rng.choice(STRINGS + ["attrs", "shape", "dtype", "name", "inputs"])] = \
            rng.choice(INTS + STRINGS)
    elif op == 3:
        deep = rng.choice((64, 999, 3000))
        container[key] = "@@DEEP@@"
    elif op == 4 and isinstance(old, list):
        container[key] = old * rng.choice((0, 2, 1000)) if len(old) < 64 else old[:1]
    elif op == 5:
        container[key] = rng.choice([None, True, {}, [], [None], {"__tensor__": {
            "dtype": rng.choice(["float32", "int64", "bool", "U8", "object", "V4", "<f2"]),
            "shape": [rng.choice(INTS)], "data": [1.0]}}])
    elif isinstance(old, bool) or not isinstance(old, (int, float, str)):
        container[key] = rng.choice(INTS + FLOATS + STRINGS)
    elif isinstance(old, str):
        container[key] = rng.choice(STRINGS + [old + old, old[:-1], old.upper()])
    else:
        container[key] = rng.choice(INTS + FLOATS)
    return doc, deep


def mutate_tensor_file(data: bytes, rng: random.Random, deployment: bool) -> bytes | None:
    """Edit the JSON header of a safetensors file (or, in a deployment file, the graph JSON
    inside it, then fix its crc32 so the edit reaches the graph reader)."""
    split = _split_tensor_file(data)
    if split is None:
        return None
    header, body = split
    meta = header.get("__metadata__")
    if deployment and isinstance(meta, dict) and isinstance(meta.get("graph"), str) \
            and rng.random() < 0.7:
        try:
            graph = json.loads(meta["graph"])
        except (ValueError, RecursionError):
            return None
        graph, deep = _mutate_json(graph, rng)
        text = json.dumps(graph, separators=(",", ":"))
        if deep:
            text = text.replace('"@@DEEP@@"', "[" * deep + "]" * deep, 1)
        meta["graph"] = text
        if rng.random() < 0.9:
            meta["graph_crc32"] = str(zlib.crc32(text.encode("utf-8", "surrogatepass")))
        return _join_tensor_file(header, body)[:MAX_LEN]
    header, deep = _mutate_json(header, rng)
    return _join_tensor_file(header, body, deep)[:MAX_LEN]


def mutate(target: str, data: bytes, rng: random.Random) -> bytes:
    """A structure-aware mutation of ``data`` when it parses, else a byte-level one."""
    if rng.random() < 0.6:
        try:
            if target == "onnx":
                mutant = mutate_proto(data, rng)
            else:
                mutant = mutate_tensor_file(data, rng, target == "deployment")
        except Exception:  # noqa: BLE001: a mutant the helpers cannot build; mutate bytes
            mutant = None
        if mutant is not None:
            return mutant
    return mutate_bytes(data, rng)
