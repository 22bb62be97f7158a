"""Inference latency of the nine light model-zoo nets (onnx/backend/test/data/light) and of six
small PyTorch exports: portable's CPU backend beside onnxruntime, measured in the same run;
prints JSON.

Each runtime runs in its own worker process (two runtimes in one process slow each other down
on a small machine), at 1 and 2 threads (BLAS threads for portable, ``intra_op_num_threads``
for onnxruntime). A worker prepares every model once per batch size and times it: the median
of at least ``--min-iters`` runs and ``--min-seconds`` of running. The workers of the two
runtimes take turns, ``--repeats`` times (the order flips each repeat), and each figure is the
median over repeats, so load on the machine affects both alike. For batch 8 the input's batch
dim and the batch dim of the nets' flatten Reshape targets (stored as ``[1, ...]``) become 8.

``--suite`` picks the models: ``light`` (the default) the nine nets above, ``small`` the six
small models exported by PyTorch in ``tests/fixtures/torch_small`` (LeNet, MobileNetV2 at width
0.25, a CIFAR ResNet-18, a 2-layer LSTM, a 2-layer transformer encoder, an MLP; see its
``record.py``), ``all`` both. The small models have a symbolic batch dim; each is fed its
recorded batch-1 input, repeated to the batch size. ``--models`` picks by name from any suite.

The summary gives, per batch size and thread count, the geometric mean over the models of
portable's latency divided by onnxruntime's, and the models with the largest ratio.

Usage:
    python benchmarks/inference_latency.py [--suite {light,small,all}]
        [--models squeezenet resnet50 ...] [--batches 1 8]
        [--threads 1 2] [--repeats 2] [--min-iters 3] [--min-seconds 1.0] [--profile]

``--profile`` adds, per model (batch 1, one thread, in its own worker), the share of portable's
run time spent in each op type (kernels timed one by one in the compiled plan), to see which
kernels dominate.

``--dynamic`` adds the dynamic-shape case (``--dynamic-only``: only it): a small decoder-only
transformer built with onnx.helper (token and position embeddings, ``--layers`` blocks of
causal self-attention written as MatMul/Softmax and a MLP, symbolic batch and sequence
length), run at sequence lengths ``--seq-lens`` (default 16..512) in increasing order, then
once more each. Per length it gives the first call (portable plans the new shape there; ORT
sets up its own) and the median of later calls (portable's cached plan), beside onnxruntime,
and ``planning_ms``: the first call minus the median of later ones, the cost of a new shape.
The repeated pass shows that a length seen before is not planned again (``plans_made``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = os.path.join(ROOT, "tests", "fixtures", "torch_small")
sys.path.insert(0, ROOT)


def light_models() -> dict[str, str]:
    import onnx

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return {name[len("light_"):-len(".onnx")]: os.path.join(folder, name)
            for name in sorted(os.listdir(folder)) if name.endswith(".onnx")}


def batched_model(path: str, batch: int) -> tuple:
    """The model with batch dim ``batch`` (input and flatten Reshape targets), and its input
    (arange(n) / n, as onnx's backend test feeds it)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    inits = {t.name: t for t in model.graph.initializer}
    info = next(i for i in model.graph.input if i.name not in inits)
    dims = info.type.tensor_type.shape.dim
    dims[0].dim_value = batch
    for node in model.graph.node:
        if node.op_type == "Reshape" and node.input[1] in inits:
            target = numpy_helper.to_array(inits[node.input[1]]).copy()
            if target.size and target[0] == 1:
                target[0] = batch
                inits[node.input[1]].CopyFrom(numpy_helper.from_array(target, node.input[1]))
    shape = tuple(d.dim_value for d in dims)
    count = int(np.prod(shape))
    x = (np.arange(count).reshape(shape) / count).astype(np.float32)
    return model, info.name, x


def small_models() -> dict[str, str]:
    """The small suite: PyTorch exports recorded by ``tests/fixtures/torch_small/record.py``."""
    return {name[:-len(".onnx")]: os.path.join(SMALL, name)
            for name in sorted(os.listdir(SMALL)) if name.endswith(".onnx")}


SUITES = {"light": (light_models,), "small": (small_models,),
          "all": (light_models, small_models)}


def suite_models(suite: str = "all") -> dict[str, str]:
    """Model name -> path, for the suite (the names of the suites do not overlap)."""
    return {name: path for find in SUITES[suite] for name, path in find().items()}


def model_and_input(path: str, batch: int) -> tuple:
    """``batched_model`` for a light net; a small-suite export has a symbolic batch dim, so it
    is used as is, with its recorded batch-1 input repeated ``batch`` times."""
    if os.path.dirname(path) != SMALL:
        return batched_model(path, batch)
    import numpy as np
    import onnx

    x = np.load(path[:-len(".onnx")] + "_input.npy", allow_pickle=False)
    return onnx.load(path), "input", np.repeat(x, batch, axis=0)


def _time(run, min_iters: int, min_seconds: float) -> tuple[float, int]:
    run()  # warm-up (plans, caches)
    times = []
    began = time.perf_counter()
    while len(times) < min_iters or time.perf_counter() - began < min_seconds:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times), len(times)


def worker(runtime: str, threads: int, models: list[str], batches: list[int],
           min_iters: int, min_seconds: float) -> None:
    """Time each model in this process; one JSON line per (model, batch)."""
    paths = suite_models()
    for name in models:
        for batch in batches:
            model, input_name, x = model_and_input(paths[name], batch)
            if runtime == "portable":
                from exporters.onnx import backend

                rep = backend.prepare(model)
                ms, iters = _time(lambda: rep.run({input_name: x}), min_iters, min_seconds)
            else:
                import onnxruntime as ort

                options = ort.SessionOptions()
                options.intra_op_num_threads = threads
                options.inter_op_num_threads = 1
                session = ort.InferenceSession(model.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
                ms, iters = _time(lambda: session.run(None, {input_name: x}), min_iters,
                                  min_seconds)
            print(json.dumps({"model": name, "batch": batch, "ms": round(ms, 3),
                              "iters": iters}), flush=True)


# -- the dynamic-shape case: a decoder-only transformer -----------------------------------------


def decoder_model(layers: int = 2, width: int = 128, heads: int = 4, vocab: int = 1000,
                  max_len: int = 512, seed: int = 0):
    """A GPT-style decoder as an ONNX model: input_ids int64 [batch, seq] (both symbolic) ->
    logits float32 [batch, seq, vocab]. Attention is MatMul/Softmax with a causal mask sliced
    from a [max_len, max_len] table by the sequence length (a Shape -> Slice chain, so every
    shape follows the input's)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(name, *shape):
        return const(name, (rng.normal(size=shape) / np.sqrt(shape[0])).astype(np.float32))

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], **attrs))
        return output

    head = width // heads
    ints = lambda *v: np.array(v, np.int64)  # noqa: E731
    node("Shape", ["input_ids"], "ids_shape")
    seq = node("Slice", ["ids_shape", const("one", ints(1)), const("two", ints(2))], "seq")
    zero = const("zero", ints(0))
    tokens = node("Gather", [weight("tok_emb", vocab, width), "input_ids"], "tokens")
    positions = node("Slice", [weight("pos_emb", max_len, width), zero, seq, zero], "positions")
    x = node("Add", [tokens, positions], "x0")
    causal = np.triu(np.full((max_len, max_len), -1e9, np.float32), 1)
    mask = node("Slice", [const("causal", causal), const("zeros2", ints(0, 0)),
                          node("Concat", [seq, seq], "seq2", axis=0),
                          const("axes01", ints(0, 1))], "mask")
    split_heads = const("split_heads", ints(0, 0, heads, head))
    merge_heads = const("merge_heads", ints(0, 0, width))
    scale = const("scale", np.array(1.0 / np.sqrt(head), np.float32))
    ones, zeros = np.ones(width, np.float32), np.zeros(width, np.float32)
    for i in range(layers):
        p = f"l{i}_"
        h = node("LayerNormalization", [x, const(p + "ln1_g", ones), const(p + "ln1_b", zeros)],
                 p + "h", axis=-1)
        qkv = {}
        for part in "qkv":
            flat = node("MatMul", [h, weight(p + "w" + part, width, width)], p + part)
            shaped = node("Reshape", [flat, split_heads], p + part + "_heads")
            perm = [0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]
            qkv[part] = node("Transpose", [shaped], p + part + "_t", perm=perm)
        scores = node("Mul", [node("MatMul", [qkv["q"], qkv["k"]], p + "qk"), scale],
                      p + "scores")
        probs = node("Softmax", [node("Add", [scores, mask], p + "masked")], p + "probs",
                     axis=-1)
        context = node("Transpose", [node("MatMul", [probs, qkv["v"]], p + "ctx")],
                       p + "ctx_t", perm=[0, 2, 1, 3])
        merged = node("Reshape", [context, merge_heads], p + "merged")
        x = node("Add", [x, node("MatMul", [merged, weight(p + "wo", width, width)],
                                 p + "attn")], p + "x1")
        h = node("LayerNormalization", [x, const(p + "ln2_g", ones), const(p + "ln2_b", zeros)],
                 p + "h2", axis=-1)
        up = node("Relu", [node("MatMul", [h, weight(p + "w_up", width, 4 * width)],
                                p + "up")], p + "act")
        x = node("Add", [x, node("MatMul", [up, weight(p + "w_down", 4 * width, width)],
                                 p + "down")], p + "x2")
    h = node("LayerNormalization", [x, const("lnf_g", ones), const("lnf_b", zeros)], "hf",
             axis=-1)
    node("MatMul", [h, weight("w_out", width, vocab)], "logits")
    graph = helper.make_graph(
        nodes, "decoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])],
        inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def dynamic_worker(runtime: str, threads: int, seq_lens: list[int], layers: int,
                   min_iters: int, min_seconds: float) -> None:
    """Time the decoder at each sequence length in this process (first call, then later
    calls), lengths in increasing order and then once more; one JSON line per length and
    pass."""
    import numpy as np

    model = decoder_model(layers=layers, max_len=max(seq_lens))
    if runtime == "portable":
        from exporters.onnx import backend

        rep = backend.prepare(model)
        run = lambda ids: rep.run({"input_ids": ids})  # noqa: E731
        plans = lambda: len(rep._plans)  # noqa: E731
    else:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        run = lambda ids: session.run(None, {"input_ids": ids})  # noqa: E731
        plans = lambda: None  # noqa: E731
    rng = np.random.default_rng(0)
    for repeat, lengths in enumerate((seq_lens, seq_lens)):
        for seq in lengths:
            ids = rng.integers(0, 1000, size=(1, seq), dtype=np.int64)
            start = time.perf_counter()
            run(ids)
            first = time.perf_counter() - start
            times, began = [], time.perf_counter()
            while len(times) < min_iters or time.perf_counter() - began < min_seconds:
                start = time.perf_counter()
                run(ids)
                times.append(time.perf_counter() - start)
            later = statistics.median(times)
            print(json.dumps({"seq": seq, "pass": repeat, "first_ms": round(1e3 * first, 3),
                              "later_ms": round(1e3 * later, 3), "iters": len(times),
                              "plans_cached": plans()}), flush=True)


def dynamic_case(args: argparse.Namespace) -> dict:
    """The dynamic-shape case: both runtimes in their own workers, at one thread count."""
    threads = args.threads[0]
    rows = {}
    for runtime in ("portable", "onnxruntime"):
        for row in _spawn(f"dynamic-{runtime}", threads, args):
            rows.setdefault((row["seq"], row["pass"]), {})[runtime] = row
    results = []
    for (seq, repeat), pair in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ours, theirs = pair["portable"], pair["onnxruntime"]
        results.append({
            "seq": seq, "pass": "new shape" if repeat == 0 else "seen before",
            "portable_first_ms": ours["first_ms"], "portable_later_ms": ours["later_ms"],
            "portable_planning_ms": round(ours["first_ms"] - ours["later_ms"], 3),
            "onnxruntime_first_ms": theirs["first_ms"],
            "onnxruntime_later_ms": theirs["later_ms"],
            "later_ratio": round(ours["later_ms"] / theirs["later_ms"], 3),
            "first_ratio": round(ours["first_ms"] / theirs["first_ms"], 3),
            "portable_plans_cached": ours["plans_cached"]})
    new = [r for r in results if r["pass"] == "new shape"]
    return {"model": f"decoder-only transformer, {args.layers} layers, width 128, 4 heads, "
                     f"vocab 1000, batch 1, symbolic batch and sequence",
            "threads": threads,
            "planning_ms_per_new_shape": {r["seq"]: r["portable_planning_ms"] for r in new},
            "geomean_later_ratio": round(math.exp(statistics.fmean(
                math.log(r["later_ratio"]) for r in new)), 3),
            "results": results}


def profile(models: list[str], runs: int = 5) -> dict:
    """Share of portable's time per op type (batch 1): the compiled plan's bound run with
    each kernel call timed (``CompiledGraph.run(feeds, timings)``), ``runs`` times; a step
    counts its median (on a shared machine one preempted step would otherwise stand out).
    Views (Reshape, Flatten ... of planned buffers) cost nothing at run time and are not
    listed."""
    from exporters.onnx import backend
    from portable.executor.feeds import to_device

    paths = suite_models()
    result = {}
    for name in models:
        model, input_name, x = model_and_input(paths[name], 1)
        rep = backend.prepare(model)
        rep.run({input_name: x})
        plan = rep.plan({input_name: x})
        feeds = {input_name: to_device(plan.backend, x)}
        step_times: dict[int, tuple[str, list[float]]] = {}
        for _ in range(runs):
            timings: list = []
            plan.run(feeds, timings)
            for index, (node, seconds) in enumerate(timings):
                step_times.setdefault(index, (node.op, []))[1].append(seconds)
        per_op: dict[str, float] = {}
        for op, times in step_times.values():
            per_op[op] = per_op.get(op, 0.0) + statistics.median(times)
        total = sum(per_op.values())
        result[name] = {op: round(t / total, 3) for op, t in
                        sorted(per_op.items(), key=lambda kv: -kv[1]) if t / total >= 0.01}
        result[name]["ms_per_run"] = round(1e3 * total, 2)
        result[name]["steps"] = len(step_times)  # (many short steps: per-step overhead counts)
    return result


def _spawn(runtime: str, threads: int, args: argparse.Namespace) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), PYTHONPATH=ROOT)
    command = [sys.executable, os.path.abspath(__file__), "--worker", runtime, "--threads",
               str(threads), "--min-iters", str(args.min_iters), "--min-seconds",
               str(args.min_seconds), "--models", *args.models, "--batches",
               *map(str, args.batches), "--seq-lens", *map(str, args.seq_lens), "--layers",
               str(args.layers)]
    done = subprocess.run(command, capture_output=True, text=True, env=env,
                          timeout=args.worker_timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{runtime} worker failed:\n{done.stderr[-3000:]}")
    if runtime == "profile":
        return json.loads(done.stdout.splitlines()[-1])
    if runtime.startswith("dynamic-"):
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {(row["model"], row["batch"]): row["ms"] for row in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=tuple(SUITES), default="light",
                        help="the models timed when --models is not given")
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--min-iters", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--worker-timeout", type=float, default=3600.0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--dynamic", action="store_true",
                        help="add the dynamic-shape case (a decoder at --seq-lens)")
    parser.add_argument("--dynamic-only", action="store_true",
                        help="run only the dynamic-shape case")
    parser.add_argument("--seq-lens", nargs="+", type=int,
                        default=[16, 32, 64, 128, 256, 512])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--worker", choices=("portable", "onnxruntime", "profile",
                                             "dynamic-portable", "dynamic-onnxruntime"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.models = args.models or list(suite_models(args.suite))
    if args.worker == "profile":
        print(json.dumps(profile(args.models)))
        return 0
    if args.worker and args.worker.startswith("dynamic-"):
        dynamic_worker(args.worker[len("dynamic-"):], args.threads[0], args.seq_lens,
                       args.layers, args.min_iters, args.min_seconds)
        return 0
    if args.dynamic_only:
        import onnxruntime

        print(json.dumps({"benchmark": "inference_latency", "unit": "ms",
                          "onnxruntime": onnxruntime.__version__,
                          "dynamic_shapes": dynamic_case(args)}, indent=1))
        return 0
    if args.worker:
        worker(args.worker, args.threads[0], args.models, args.batches, args.min_iters,
               args.min_seconds)
        return 0

    samples: dict[tuple, dict[str, list[float]]] = {}
    for repeat in range(args.repeats):
        for threads in args.threads:
            order = ("portable", "onnxruntime") if repeat % 2 == 0 else \
                ("onnxruntime", "portable")
            for runtime in order:
                for (model, batch), ms in _spawn(runtime, threads, args).items():
                    samples.setdefault((model, batch, threads), {}).setdefault(
                        runtime, []).append(ms)
    rows, summary = [], {}
    for (model, batch, threads), by_runtime in sorted(samples.items()):
        ours = statistics.median(by_runtime["portable"])
        theirs = statistics.median(by_runtime["onnxruntime"])
        rows.append({"model": model, "batch": batch, "threads": threads,
                     "portable_ms": round(ours, 3), "onnxruntime_ms": round(theirs, 3),
                     "ratio": round(ours / theirs, 3)})
    for batch in args.batches:
        for threads in args.threads:
            group = [r for r in rows if r["batch"] == batch and r["threads"] == threads]
            if not group:
                continue
            geomean = math.exp(statistics.fmean(math.log(r["ratio"]) for r in group))
            worst = sorted(group, key=lambda r: -r["ratio"])[:3]
            summary[f"batch{batch}_threads{threads}"] = {
                "geomean_ratio": round(geomean, 3),
                "largest_gaps": [(r["model"], r["ratio"]) for r in worst]}
    import numpy
    import onnxruntime

    report = {"benchmark": "inference_latency", "suite": args.suite, "unit": "ms (median)",
              "ratio": "portable / onnxruntime (lower is better)",
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "numpy": numpy.__version__, "onnxruntime": onnxruntime.__version__},
              "repeats": args.repeats, "summary": summary, "results": rows}
    if args.profile:  # in a one-thread worker, like the figures it explains
        report["portable_time_by_op_batch1_threads1"] = _spawn("profile", 1, args)
    if args.dynamic:
        report["dynamic_shapes"] = dynamic_case(args)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
