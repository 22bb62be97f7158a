"""Record the MXNet binary NDArray files the real MXNet 1.9.1 writes (``nd.save`` of lists and
dicts of every dtype, sparse arrays, NumPy-shape files, a Gluon net's ``save_parameters``,
``collect_params().save`` and ``export`` files), with the arrays' values beside them in a
NumPy ``.npz`` (no pickle) and a JSON manifest that says what each file holds, so that
test_ndarray_files.py reads them without MXNet. Run again only to refresh the fixtures:

    /tmp/mxvenv/bin/python tests/mxnet_fidelity/record_ndarray_files.py \
        tests/mxnet_fidelity/fixtures/ndarray_files
"""
from __future__ import annotations

import json
import os
import platform
import sys

import numpy as np


def _values(rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    """One array per dtype MXNet 1.9.1 creates, plus a zero-size and a 4-D one."""
    return [
        ("f32", rng.standard_normal((2, 3)).astype(np.float32)),
        ("f64", rng.standard_normal(4)),
        ("f16", rng.standard_normal((3, 2)).astype(np.float16)),
        ("u8", rng.integers(0, 256, 5).astype(np.uint8)),
        ("i8", rng.integers(-128, 128, (2, 2)).astype(np.int8)),
        ("i32", rng.integers(-2**31, 2**31, 3).astype(np.int32)),
        ("i64", rng.integers(-2**62, 2**62, (1, 3)).astype(np.int64)),
        ("bool", rng.integers(0, 2, 4).astype(np.bool_)),
        ("zero_dim", np.zeros((2, 0, 3), np.float32)),
        ("four_d", rng.standard_normal((2, 3, 2, 2)).astype(np.float32)),
    ]


def _net(mx):
    from mxnet.gluon import nn

    net = nn.HybridSequential(prefix="net_")
    with net.name_scope():
        net.add(nn.Conv2D(4, 3, in_channels=2), nn.BatchNorm(in_channels=4),
                nn.Activation("relu"), nn.Dense(3, in_units=64))  # Dense flattens
    net.initialize(mx.init.Xavier())
    rng = np.random.default_rng(7)
    for name, param in net.collect_params().items():  # every value non-trivial, BN stats too
        value = rng.standard_normal(param.shape).astype(np.float32)
        if name.endswith(("running_var", "gamma")):
            value = np.abs(value) + 0.5
        param.set_data(mx.nd.array(value))
    return net


def main() -> None:
    import mxnet as mx

    folder = sys.argv[1]
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(2024)
    values = _values(rng)
    manifest: dict = {"recorded_with": {"mxnet": mx.__version__, "numpy": np.__version__,
                                        "python": platform.python_version()}, "files": {}}
    npz: dict[str, np.ndarray] = {}

    def record(file: str, entries: list[tuple[str | None, np.ndarray]], **extra) -> None:
        rows = []
        for index, (name, value) in enumerate(entries):
            key = f"{file}/{index}"
            npz[key] = value
            rows.append({"name": name, "key": key, "dtype": str(value.dtype),
                         "shape": list(value.shape)})
        manifest["files"][file] = {"named": bool(entries) and entries[0][0] is not None,
                                   "entries": rows, **extra}

    def path(file: str) -> str:
        return os.path.join(folder, file)

    nds = [(n, mx.nd.array(v, dtype=v.dtype)) for n, v in values]
    mx.nd.save(path("list.nd"), [a for _, a in nds])
    record("list.nd", [(None, v) for _, v in values])
    mx.nd.save(path("dict.nd"), dict(nds))
    record("dict.nd", values)
    mx.nd.save(path("single.nd"), nds[0][1])
    record("single.nd", [(None, values[0][1])])
    mx.nd.save(path("empty_list.nd"), [])
    record("empty_list.nd", [])
    mx.nd.save(path("empty_dict.nd"), {})  # MXNet loads it back as an empty list
    record("empty_dict.nd", [], saved_as="dict")

    # a 0-d array: MXNet 1.x writes it (ndim 0) but cannot load the file back
    mx.nd.save(path("scalar.nd"), [mx.nd.array(np.float32(2.5))])
    try:
        mx.nd.load(path("scalar.nd"))
        loads = True
    except mx.base.MXNetError:
        loads = False
    record("scalar.nd", [(None, np.array(2.5, np.float32))], mxnet_loads=loads)

    # bfloat16 (flag 12): MXNet's own bits of the values are kept as uint16
    bf = mx.nd.array(values[0][1]).astype(np.dtype([("bfloat16", np.uint16)]))
    mx.nd.save(path("bfloat16.nd"), {"bf": bf})
    bits = np.frombuffer(bf.asnumpy().tobytes(), np.uint16).reshape(bf.shape)
    record("bfloat16.nd", [("bf", bits.copy())], bfloat16_bits=True)

    # sparse storage: row_sparse and csr (MXNet loads them as sparse, portable dense)
    dense_rows = np.zeros((5, 3), np.float32)
    dense_rows[[1, 3]] = rng.standard_normal((2, 3))
    dense_csr = np.zeros((3, 4), np.float64)
    dense_csr[0, 1], dense_csr[2, 0], dense_csr[2, 3] = 1.5, -2.0, 3.25
    mx.nd.save(path("sparse.nd"), {"rsp": mx.nd.array(dense_rows).tostype("row_sparse"),
                                   "csr": mx.nd.array(dense_csr, dtype="float64").tostype("csr"),
                                   "dense": mx.nd.array(values[0][1])})
    record("sparse.nd", [("rsp", dense_rows), ("csr", dense_csr), ("dense", values[0][1])])

    # NumPy shape semantics: V3 magic, a real 0-d array
    with mx.util.np_shape(True):
        mx.nd.save(path("np_shape.nd"), {"s": mx.nd.array(np.float32(1.25)),
                                         "m": mx.nd.array(values[0][1])})
    record("np_shape.nd", [("s", np.array(1.25, np.float32)), ("m", values[0][1])])

    # a Gluon net: structural names, stripped prefixed names, export's arg:/aux: names
    net = _net(mx)
    x = rng.standard_normal((2, 2, 6, 6)).astype(np.float32)
    net.save_parameters(path("net.params"))
    params = {n: p.data().asnumpy() for n, p in net._collect_params_with_prefix().items()}
    record("net.params", list(params.items()))
    net.collect_params().save(path("net_prefixed.params"), strip_prefix="net_")
    record("net_prefixed.params", [(n[4:], p.data().asnumpy())
                                   for n, p in net.collect_params().items()])
    net.hybridize()
    y = net(mx.nd.array(x)).asnumpy()
    net.export(path("net_export"))
    os.remove(path("net_export-symbol.json"))  # the symbol JSON is not this test's subject
    os.replace(path("net_export-0000.params"), path("net_export.params"))
    record("net_export.params",
           [(k, v.asnumpy()) for k, v in mx.nd.load(path("net_export.params")).items()])
    npz["net/input"], npz["net/output"] = x, y

    # what nd.save and nd.load raise for arguments of other types: [class name, message]
    errors = {}
    one = mx.nd.ones(2)
    for case, call in {"tuple": lambda: mx.nd.save(path("x.nd"), (one,)),
                       "int_key": lambda: mx.nd.save(path("x.nd"), {1: one}),
                       "numpy_item": lambda: mx.nd.save(path("x.nd"), [np.ones(2)]),
                       "numpy_value": lambda: mx.nd.save(path("x.nd"), {"a": np.ones(2)}),
                       "number": lambda: mx.nd.save(path("x.nd"), 3),
                       "load_number": lambda: mx.nd.load(3),
                       "frombuffer_number": lambda: mx.nd.load_frombuffer(3)}.items():
        try:
            call()
            errors[case] = None
        except Exception as exc:  # noqa: BLE001 - recording whatever MXNet raises
            errors[case] = [type(exc).__name__, str(exc)]
    manifest["errors"] = errors

    with open(path("values.npz"), "wb") as handle:
        np.savez(handle, **npz)
    with open(path("manifest.json"), "w") as handle:
        json.dump(manifest, handle, indent=1)
        handle.write("\n")


if __name__ == "__main__":
    main()
