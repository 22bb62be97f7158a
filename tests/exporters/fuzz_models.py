"""Mutation fuzzing of ONNX import and execution (run by test_fuzz.py in a subprocess).

Valid seed models are mutated at the byte level (flips, truncation, insertion, deletion,
duplication) and at the field level (dims, element types, attributes, op types, input names,
opsets, initializers, nodes); each mutant is imported, prepared and run on inputs of its
declared types. A mutant may work or fail, but a failure must be one of portable's exceptions.
The run prints one JSON line: how many mutants ran and the failures that were not ours.

Example:
    $ python -m tests.exporters.fuzz_models --seconds 30 --seed 0
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import time
import traceback

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from portable.errors import PortableError

OPS = ["Relu", "Add", "Gemm", "Conv", "MaxPool", "Reshape", "Softmax", "Concat", "Slice",
       "Transpose", "BatchNormalization", "Cast", "Shape", "Gather", "Range", "Tile", "Pad",
       "ConstantOfShape", "Expand", "Split", "Loop", "Frobnicate", ""]
DTYPES = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL, TensorProto.DOUBLE,
          TensorProto.BFLOAT16, TensorProto.STRING, TensorProto.UINT8, 0, 99]


def seeds() -> list[onnx.ModelProto]:
    rng = np.random.default_rng(0)

    def init(name, shape, dtype=np.float32):
        return numpy_helper.from_array(rng.normal(size=shape).astype(dtype), name)

    mlp = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Gemm", ["r", "w2", "b2"], ["z"], transB=1),
         helper.make_node("Softmax", ["z"], ["y"], axis=-1)], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [init("w1", (16, 8)), init("b1", (16,)), init("w2", (4, 16)), init("b2", (4,))])
    cnn = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1] * 4),
         helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["n"]),
         helper.make_node("MaxPool", ["n"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Shape", ["p"], ["sh"]),
         helper.make_node("Slice", ["sh", "zero", "one"], ["batch"]),
         helper.make_node("Concat", ["batch", "minus"], ["target"], axis=0),
         helper.make_node("Reshape", ["p", "target"], ["y"])], "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 18])],
        [init("w", (2, 1, 3, 3)), init("b", (2,)), init("s", (2,)), init("o", (2,)),
         init("m", (2,)), numpy_helper.from_array(np.ones(2, np.float32), "v"),
         numpy_helper.from_array(np.array([0], np.int64), "zero"),
         numpy_helper.from_array(np.array([1], np.int64), "one"),
         numpy_helper.from_array(np.array([-1], np.int64), "minus")])
    misc = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(
            np.array([2, 1], np.int64))),
         helper.make_node("Tile", ["x", "k"], ["t"]),
         helper.make_node("Transpose", ["t"], ["tt"], perm=[1, 0]),
         helper.make_node("Cast", ["tt"], ["ci"], to=TensorProto.INT64),
         helper.make_node("Gather", ["tt", "idx"], ["g"], axis=1),
         helper.make_node("Pad", ["g", "pads"], ["y"], mode="constant")], "misc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([0, 2], np.int64), "idx"),
         numpy_helper.from_array(np.array([1, 0, 0, 1], np.int64), "pads")])
    models = []
    for graph, opset in ((mlp, 17), (cnn, 13), (misc, 11)):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        models.append(model)
    return models


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    data = bytearray(data)
    kind = rng.randrange(5)
    position = rng.randrange(len(data))
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == 1:
        del data[position:]
    elif kind == 2:
        data[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == 3:
        del data[position:position + rng.randint(1, 32)]
    else:
        data[position:position] = data[position:position + rng.randint(1, 64)]
    return bytes(data)


def _some_int(rng: random.Random) -> int:
    return rng.choice([0, 1, 2, 3, -1, -2, 7, 64, 10 ** 6, 2 ** 31, -(2 ** 40), 2 ** 62])


def mutate_fields(model: onnx.ModelProto, rng: random.Random) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    kind = rng.randrange(12)
    nodes = graph.node
    if kind == 0 and graph.input:
        dims = graph.input[0].type.tensor_type.shape.dim
        if dims:
            dims[rng.randrange(len(dims))].dim_value = _some_int(rng)
    elif kind == 1 and graph.input:
        graph.input[rng.randrange(len(graph.input))].type.tensor_type.elem_type = \
            rng.choice(DTYPES)
    elif kind == 2 and nodes:
        nodes[rng.randrange(len(nodes))].op_type = rng.choice(OPS)
    elif kind == 3 and nodes:
        node = nodes[rng.randrange(len(nodes))]
        if node.input:
            names = [v for n in nodes for v in n.output] + ["", "nowhere", node.output[0]]
            node.input[rng.randrange(len(node.input))] = rng.choice(names)
    elif kind == 4 and nodes:
        node = nodes[rng.randrange(len(nodes))]
        if node.attribute:
            attr = node.attribute[rng.randrange(len(node.attribute))]
            if attr.type == onnx.AttributeProto.INT:
                attr.i = _some_int(rng)
            elif attr.type == onnx.AttributeProto.INTS and attr.ints:
                attr.ints[rng.randrange(len(attr.ints))] = _some_int(rng)
            elif attr.type == onnx.AttributeProto.FLOAT:
                attr.f = rng.choice([0.0, -1.0, 1e30, float("nan"), float("inf")])
            else:
                attr.type = rng.choice([1, 2, 3, 4, 5, 6, 7, 11])
        else:
            node.attribute.append(helper.make_attribute(rng.choice(["axis", "perm", "to"]),
                                                        _some_int(rng)))
    elif kind == 5:
        model.opset_import[0].version = rng.choice([0, 1, 6, 7, 9, 12, 13, 18, 22, 28, 29,
                                                    1000])
    elif kind == 6 and graph.initializer:
        tensor = graph.initializer[rng.randrange(len(graph.initializer))]
        if rng.random() < 0.5 and tensor.dims:
            tensor.dims[rng.randrange(len(tensor.dims))] = _some_int(rng)
        else:
            tensor.data_type = rng.choice(DTYPES)
    elif kind == 7 and graph.initializer:
        del graph.initializer[rng.randrange(len(graph.initializer))]
    elif kind == 8 and nodes:
        del nodes[rng.randrange(len(nodes))]
    elif kind == 9 and nodes:
        nodes.append(nodes[rng.randrange(len(nodes))])
    elif kind == 10 and len(nodes) > 1:
        i, j = rng.randrange(len(nodes)), rng.randrange(len(nodes))
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(nodes[i])
        b.CopyFrom(nodes[j])
        nodes[i].CopyFrom(b)
        nodes[j].CopyFrom(a)
    elif kind == 11 and nodes:
        node = nodes[rng.randrange(len(nodes))]
        node.domain = rng.choice(["portable", "com.microsoft", "ai.onnx", "", "x" * 300])
    return model


def _inputs(rep, rng: np.random.Generator) -> dict:
    feeds = {}
    for name, type_ in rep.graph.inputs:
        shape = tuple(2 if d is None else d for d in type_.shape)
        if int(np.prod(shape, dtype=object)) > 1 << 20:
            shape = tuple(min(d, 4) for d in shape)  # the run is expected to refuse it
        feeds[name] = rng.normal(size=shape).astype(type_.dtype)
    return feeds


def exercise(model, rng: np.random.Generator) -> str:
    """Import, prepare and run; returns 'ok' or 'refused' (one of our errors)."""
    from exporters.onnx import backend

    try:
        rep = backend.prepare(model)
        rep.run(_inputs(rep, rng))
    except PortableError:
        return "refused"
    return "ok"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--minimum", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-gib", type=float, default=6.0)
    args = parser.parse_args(argv)
    limit = int(args.memory_gib * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # runaway allocations fail fast
    np.seterr(all="ignore")
    rng = random.Random(args.seed)
    data_rng = np.random.default_rng(args.seed)
    models = seeds()
    serialized = [m.SerializeToString() for m in models]
    counts = {"ok": 0, "refused": 0}
    foreign = []
    started = time.monotonic()
    runs = 0
    while runs < args.minimum or time.monotonic() - started < args.seconds:
        if runs >= args.minimum and time.monotonic() - started >= args.seconds:
            break
        index = rng.randrange(len(models))
        mutant = mutate_bytes(serialized[index], rng) if rng.random() < 0.5 else \
            mutate_fields(models[index], rng)
        try:
            counts[exercise(mutant, data_rng)] += 1
        except Exception as exc:  # not one of ours: the finding
            foreign.append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}")
        runs += 1
        if runs >= args.minimum and time.monotonic() - started > args.seconds:
            break
    print(json.dumps({"mutants": runs, **counts, "foreign": foreign[:20],
                      "foreign_count": len(foreign),
                      "seconds": round(time.monotonic() - started, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
