"""The compiled CPU tier (backends/numpy/jit) beside the xp kernels it overrides and onnxruntime;
prints JSON.

Part ``kernels``: per op and shape (the model-zoo nets' pools, depthwise convolutions and two
Convs of the flat products, LeNet's training pool, the LSTM layers of
tests/fixtures/torch_small/lstm.onnx and GRUs of their size, one larger LSTM), the median
time of the xp kernel, the compiled kernel at numba's default thread count and at one thread,
and, for forward ops, a one-node onnxruntime model of the same shape at one thread
(``intra_op_num_threads=1``); the kernels take turns within each round. Times are
medians of wall and of process CPU time; the ratios are xp / compiled (wall) and, from CPU
time, xp / compiled at one thread and compiled (one thread) / onnxruntime. ``compiled`` says
whether the compiled loop takes the call (else the override runs the xp kernel).

Part ``compile``: the first call of each compiled kernel in a fresh process, with an empty
on-disk cache (``NUMBA_CACHE_DIR`` pointed at a new folder: compiling) and again with the cache
it filled (loading), and the time to import numba and the kernel modules.

Usage:
    python benchmarks/jit_kernels.py [--part kernels compile] [--rounds 15] [--ops LSTM GRU]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads: one BLAS thread
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# (label, op, input shape, attributes, weight shape for Conv); "+indices": MaxPool's two outputs;
# LSTM/GRU: X's shape (T, B, input size), with bias and initial states, all outputs
POOL_3X3_S2 = dict(kernel_shape=[3, 3], strides=[2, 2])
POOL_3X3_SAME = dict(kernel_shape=[3, 3], pads=[1] * 4)  # stride 1, as large as its input
CASES = [
    ("squeezenet1.0 maxpool", "MaxPool", (1, 96, 109, 109), POOL_3X3_S2, None),
    ("squeezenet1.0 maxpool+indices", "MaxPool", (1, 96, 109, 109), POOL_3X3_S2, None),
    ("squeezenet1.1 maxpool", "MaxPool", (1, 64, 111, 111), POOL_3X3_S2, None),
    ("shufflenet avgpool", "AveragePool", (1, 24, 56, 56), dict(POOL_3X3_S2, pads=[1] * 4),
     None),
    ("shufflenet avgpool", "AveragePool", (1, 136, 28, 28), dict(POOL_3X3_S2, pads=[1] * 4),
     None),
    ("inception_v1 maxpool s1", "MaxPool", (1, 832, 14, 14), POOL_3X3_SAME, None),
    ("inception_v1 maxpool s1", "MaxPool", (1, 480, 28, 28), POOL_3X3_SAME, None),
    ("inception_v2 avgpool s1", "AveragePool", (1, 576, 14, 14), POOL_3X3_SAME, None),
    ("inception_v2 avgpool s1", "AveragePool", (1, 256, 28, 28), POOL_3X3_SAME, None),
    ("lenet maxpool b64", "MaxPool", (64, 6, 28, 28), dict(kernel_shape=[2, 2], strides=[2, 2]),
     None),
    ("lenet maxpool+indices b64", "MaxPool", (64, 6, 28, 28),
     dict(kernel_shape=[2, 2], strides=[2, 2]), None),
    ("lenet maxpool b64", "portable.MaxPoolGrad", (64, 6, 28, 28),
     dict(kernel_shape=[2, 2], strides=[2, 2]), None),
    ("lenet maxpool2 b64", "portable.MaxPoolGrad", (64, 16, 10, 10),
     dict(kernel_shape=[2, 2], strides=[2, 2]), None),
    ("shufflenet avgpool grad", "portable.AveragePoolGrad", (1, 136, 28, 28),
     dict(POOL_3X3_S2, pads=[1] * 4), None),
    ("depthwise 3x3", "Conv", (1, 32, 56, 56), dict(group=32, pads=[1] * 4), (32, 1, 3, 3)),
    ("depthwise 3x3", "Conv", (1, 144, 28, 28), dict(group=144, pads=[1] * 4), (144, 1, 3, 3)),
    ("shufflenet depthwise", "Conv", (1, 272, 14, 14), dict(group=272, pads=[1] * 4),
     (272, 1, 3, 3)),
    ("depthwise 3x3 dX", "ConvTranspose", (1, 144, 28, 28), dict(group=144, pads=[1] * 4),
     (144, 1, 3, 3)),
    ("depthwise 3x3 dW b8", "portable.ConvGradWeight", (8, 144, 28, 28),
     dict(group=144, pads=[1] * 4, kernel_shape=[3, 3]), (144, 1, 3, 3)),
    ("squeezenet1.1 3x3 expand (flat products)", "Conv", (1, 16, 55, 55), dict(pads=[1] * 4),
     (64, 16, 3, 3)),
    ("resnet50 7x7 stride-2 stem (flat products)", "Conv", (1, 3, 224, 224),
     dict(strides=[2, 2], pads=[3] * 4), (64, 3, 7, 7)),
    ("torch_small lstm layer 1", "LSTM", (16, 1, 32), dict(hidden_size=64), None),
    ("torch_small lstm layer 2", "LSTM", (16, 1, 64), dict(hidden_size=64), None),
    ("gru h64 (torch export)", "GRU", (16, 1, 32), dict(hidden_size=64, linear_before_reset=1),
     None),
    ("gru h64", "GRU", (16, 1, 32), dict(hidden_size=64), None),
    ("lstm h256 b16 bidirectional", "LSTM", (16, 16, 128),
     dict(hidden_size=256, direction="bidirectional"), None),
]
RNN_STATES = {"LSTM": 2, "GRU": 1}  # recurrent states: outputs after Y, inputs after sequence_lens


def _median_rounds(runs: dict, rounds: int) -> tuple[dict, dict]:
    """Median wall and process CPU seconds per named callable, the callables taking turns
    within each round. On shared cores the CPU time is the steadier figure for one-thread
    runs (the wall time adds whatever the scheduler gave other processes)."""
    wall = {name: [] for name in runs}
    cpu = {name: [] for name in runs}
    for fn in runs.values():
        fn()  # warm-up: compiling or loading, scratch buffers, page faults
    for r in range(rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for name in order:
            start, start_cpu = time.perf_counter(), time.process_time()
            runs[name]()
            cpu[name].append(time.process_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
    return ({name: statistics.median(t) for name, t in wall.items()},
            {name: statistics.median(t) for name, t in cpu.items()})


def _onnxruntime(op: str, arrays: list, attrs: dict, outputs: int):
    """A callable running the op as a one-node onnxruntime model at one thread: the first
    array is fed, the others (weights, states; None where absent) are initializers."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    x = arrays[0]
    inputs = ["x"] + [f"in{k}" if a is not None else "" for k, a in enumerate(arrays) if k]
    types = ((TensorProto.FLOAT,) * outputs if op in RNN_STATES
             else (TensorProto.FLOAT, TensorProto.INT64))
    names = ["y", "indices"][:outputs] if op not in RNN_STATES else \
        ["y", "y_h", "y_c"][:outputs]
    node = helper.make_node(op, inputs, names, **attrs)
    graph = helper.make_graph(
        [node], "one", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(n, t, None) for n, t in zip(names, types)],
        initializer=[numpy_helper.from_array(a, n) for n, a in zip(inputs[1:], arrays[1:])
                     if a is not None])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"x": x})


def _arrays(label, op, shape, attrs, weight, rng):
    """(inputs, outputs) of one kernel call, with the attributes the kernel receives."""
    inputs, shapes = _shapes(label, op, shape, attrs, weight, rng)
    import numpy as np

    dtypes = [np.float32] * len(shapes) if op in RNN_STATES else [np.float32, np.int64]
    return inputs, [np.empty(s, d) for s, d in zip(shapes, dtypes)]


def _shapes(label, op, shape, attrs, weight, rng):
    import numpy as np

    from portable.ops.conv import pool_geometry, transpose_geometry, window_geometry

    x = rng.standard_normal(shape).astype(np.float32)
    if op in RNN_STATES:
        return _rnn_shapes(op, x, attrs, rng)
    if op in ("MaxPool", "AveragePool"):
        out = shape[:2] + pool_geometry(shape[2:], attrs).out
        return [x], [out, out] if "indices" in label else [out]
    if op.endswith("PoolGrad"):
        out = shape[:2] + pool_geometry(shape[2:], attrs).out
        return [rng.standard_normal(out).astype(np.float32), x], [shape]
    w = rng.standard_normal(weight).astype(np.float32)
    if op == "Conv":
        return [x, w], [(shape[0], weight[0]) + window_geometry(shape[2:], weight[2:], attrs).out]
    if op == "ConvTranspose":
        return [x, w], [(shape[0], attrs["group"]) +
                        transpose_geometry(shape[2:], weight[2:], attrs).out]
    out = (shape[0], weight[0]) + window_geometry(shape[2:], weight[2:], attrs).out
    return [x, rng.standard_normal(out).astype(np.float32)], [weight]


def _rnn_shapes(op, x, attrs, rng):
    """X, W, R, B, no sequence_lens, initial states (layout 0); Y and the final states."""
    import numpy as np

    from portable.ops.rnn import DIRECTIONS

    (steps, batch, size), hidden = x.shape, attrs["hidden_size"]
    dirs, gates = DIRECTIONS[attrs["direction"]], {"LSTM": 4, "GRU": 3}[op]
    scale = 1 / np.sqrt(hidden)  # PyTorch's initialisation range: gates neither saturate nor die

    def weight(*shape):
        return rng.uniform(-scale, scale, shape).astype(np.float32)

    state = (dirs, batch, hidden)
    inputs = [x, weight(dirs, gates * hidden, size), weight(dirs, gates * hidden, hidden),
              weight(dirs, 2 * gates * hidden), None]
    inputs += [weight(*state) for _ in range(RNN_STATES[op])]
    return inputs, [(steps, dirs, batch, hidden)] + [state] * RNN_STATES[op]


def kernels_part(rounds: int, ops: list[str] | None = None) -> list[dict]:
    import numba
    import numpy as np

    import portable as pt
    from backends.numpy import jit
    from backends.xp.kernels import kernels as xp_kernels
    from portable.backend import KernelContext, array_types, bound_kernel
    from portable.ops import registry

    threads = numba.get_num_threads()
    ctx = KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)
    rows = []
    for label, op, shape, given, weight in CASES:
        if ops and op not in ops:
            continue
        rng = np.random.default_rng(0)
        attrs = {k: given.get(k, spec.default) for k, spec in registry.get(op).attrs.items()}
        inputs, outputs = _arrays(label, op, shape, attrs, weight, rng)
        module = jit.OVERRIDES[op][0]
        compiled = __import__(f"backends.numpy.jit.{module}", fromlist=["kernels"]).kernels[op]

        def bind(kernel, inputs=inputs, outputs=outputs, attrs=attrs):
            """The kernel prepared once for these types, as a planned step runs it."""
            return bound_kernel(kernel, ctx.backend, array_types(inputs), array_types(outputs),
                                attrs)

        def call(kernel, inputs=inputs, outputs=outputs, attrs=attrs):
            bound = bind(kernel)
            return lambda: bound(ctx, inputs, outputs, attrs)

        def one_thread(bound=bind(jit.kernels[op]), inputs=inputs, outputs=outputs,
                       attrs=attrs):
            numba.set_num_threads(1)
            try:
                bound(ctx, inputs, outputs, attrs)
            finally:
                numba.set_num_threads(threads)

        runs = {"xp": call(xp_kernels[op]), "jit": call(jit.kernels[op]),
                "jit_1thread": one_thread}
        if "." not in op and op != "ConvTranspose":
            runs["onnxruntime"] = _onnxruntime(op, inputs, given, len(outputs))
        times, cpu = _median_rounds(runs, rounds)
        # whether the compiled loop takes this call (else the override runs the xp kernel)
        state = compiled.compiled_prepare(array_types(inputs), array_types(outputs), attrs)
        taken = state is not None and compiled.compiled_run(state, ctx, inputs, outputs, attrs)
        row = {"case": label, "op": op, "shape": list(shape), "attrs": given, "compiled": taken,
               **{f"{k}_ms": round(v * 1e3, 4) for k, v in times.items()},
               **{f"{k}_cpu_ms": round(v * 1e3, 4) for k, v in cpu.items()},
               "xp_over_jit": round(times["xp"] / times["jit"], 2),
               "xp_over_jit_1thread_cpu": round(cpu["xp"] / cpu["jit_1thread"], 2)}
        if "onnxruntime" in times:
            row["jit_1thread_over_onnxruntime_cpu"] = round(
                cpu["jit_1thread"] / cpu["onnxruntime"], 2)
            row["xp_over_onnxruntime_cpu"] = round(cpu["xp"] / cpu["onnxruntime"], 2)
        rows.append(row)
    return rows


_FIRST_CALL = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import numpy as np
start = time.perf_counter()
import numba, backends.numpy.jit.max_pool, backends.numpy.jit.average_pool
import backends.numpy.jit.depthwise, backends.numpy.jit.recurrent
imported = time.perf_counter() - start
from benchmarks.jit_kernels import CASES, _arrays
import portable as pt
from backends.numpy import jit
from portable.backend import KernelContext
from portable.ops import registry
ctx = KernelContext(xp=np, rng=np.random.default_rng(0), backend=pt.cpu().backend)
first = {{}}
for label, op, shape, given, weight in CASES:
    key = label if "flat products" in label else op  # (its own loop, beside depthwise's)
    if key in first or (op == "MaxPool" and "indices" not in label):
        continue
    attrs = {{k: given.get(k, s.default) for k, s in registry.get(op).attrs.items()}}
    inputs, outputs = _arrays(label, op, shape, attrs, weight, np.random.default_rng(0))
    start = time.perf_counter()
    jit.kernels[op](ctx, inputs, outputs, attrs)
    first[key] = round(time.perf_counter() - start, 3)
print(json.dumps({{"import_s": round(imported, 3), "first_call_s": first}}))
"""


def compile_part() -> dict:
    """First calls in fresh processes: an empty cache folder, then the same folder again."""
    code = _FIRST_CALL.format(root=ROOT)
    result = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for name in ("cold_cache", "warm_cache"):
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                 text=True, check=True, cwd=ROOT)
            result[name] = json.loads(out.stdout.strip().splitlines()[-1])
    for name in result:
        result[name]["total_first_calls_s"] = round(
            sum(result[name]["first_call_s"].values()), 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", nargs="+", default=["kernels", "compile"],
                        choices=["kernels", "compile"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--ops", nargs="+", help="only the kernel cases of these ops")
    args = parser.parse_args()
    import numba
    import numpy as np
    import onnxruntime

    report = {"machine": {"python": platform.python_version(), "numpy": np.__version__,
                          "numba": numba.__version__, "onnxruntime": onnxruntime.__version__,
                          "cpus": os.cpu_count(), "numba_threads": numba.get_num_threads(),
                          "load_average": os.getloadavg()}}
    if "kernels" in args.part:
        report["kernels"] = kernels_part(args.rounds, args.ops)
    if "compile" in args.part:
        report["compile"] = compile_part()
    report["load_average_after"] = os.getloadavg()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
