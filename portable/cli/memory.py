"""Plan and measure the memory of a model: naive, in-place, co-share, both and the bound.

MODEL is an ONNX file or a built-in model name (mlp, lenet, resnet18, resnet50/resnet,
vgg11, vgg16/vgg). Prediction by default; --train plans one SGD training step (forward,
gradients, momentum update) and --mirror recomputes forward values in the backward pass.
ONNX models are trained against a stand-in loss (the mean of their first output).

Measuring runs the model, so it allocates what the plan predicts: the prediction is checked
first, against --memory-budget (default: this machine's memory, or the process's
address-space limit when lower), and a plan over it is refused before anything is allocated
(``--batch 100000000000`` gives one sentence and exit code 2, not an out-of-memory crash).

Examples:
    $ portable memory resnet50 --batch 8
    $ portable memory model.onnx --json
    $ portable memory vgg16 --train --batch 32 --no-measure --plot vgg.png
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from portable.cli.arguments import byte_size, positive_int
from portable.errors import MemoryBudgetError, PortableError
from portable.passes.plan_memory import STRATEGIES
from portable.passes.pipeline import LEVELS
from portable.predict.resident import machine_bytes

MB = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="an .onnx file or a built-in model name")
    parser.add_argument("--batch", type=positive_int, default=None,
                        help="batch size (default: the model's, 1 for built-in models)")
    parser.add_argument("--train", action="store_true", help="plan a training step")
    parser.add_argument("--mirror", action="store_true",
                        help="with --train: recompute forward values (less memory, more work)")
    parser.add_argument("--strategy", choices=STRATEGIES, default="both",
                        help="the memory strategy to run and measure (default both)")
    parser.add_argument("--optimize", choices=LEVELS, default="all",
                        help="graph optimisation level for prediction (default all)")
    parser.add_argument("--no-measure", action="store_true", help="plan only; do not run")
    parser.add_argument("--memory-budget", type=byte_size, default=None, metavar="SIZE",
                        help="measure only a plan predicted to fit in this, e.g. 2GiB "
                        "(default: this machine's memory)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--plot", metavar="FILE.png", help="draw the memory timeline")


def load_onnx(path: str, train: bool, batch: int | None = None):
    """An ONNX model as a graph, constants folded (weights built by constant subgraphs become
    initializers). For prediction every weight is a constant; for training the float weights
    read at differentiable inputs become parameters (graph inputs) and the loss is the mean of
    the first output. Returns ``(graph, parameter names)``."""
    from portable.io.onnx.importer import import_graph
    from portable.ir.graph import Node, TensorType
    from portable.ops import registry
    from portable.passes.fold_constants import fold_constants
    from portable.passes.set_batch import set_batch

    graph, _ = import_graph(path, params_as_inputs=False)
    if batch is not None:
        graph = set_batch(graph, batch)
    graph = fold_constants(graph)
    if not train:
        return graph, []
    frozen = {name for node in graph.nodes for i, name in enumerate(node.inputs)
              if i in registry.get(node.op).nondiff_inputs}
    params = [name for name, value in graph.initializers.items()
              if value.dtype.kind == "f" and value.size > 1 and name not in frozen]
    loss = f"{graph.outputs[0]}/mean_loss"
    node = Node("ReduceMean", (graph.outputs[0],), (loss,), {"keepdims": 0},
                name="stand-in loss")
    graph = graph.replace(
        nodes=graph.nodes + (node,), outputs=(loss,),
        inputs=graph.inputs + tuple((n, TensorType(graph.initializers[n].shape,
                                                   graph.initializers[n].dtype))
                                    for n in params),
        initializers={k: v for k, v in graph.initializers.items() if k not in params})
    return graph, params


def check_predicted(report, budget: int | None) -> None:
    """Refuse to measure a plan whose predicted peak is over ``budget`` (default: the
    machine's memory): measuring would allocate all of it."""
    from portable.sizes import format_bytes as fmt

    limit = machine_bytes() if budget is None else budget
    if report.predicted_peak_bytes <= limit:
        return
    parts = {"planned": report.planned_bytes, "workspace": report.workspace_bytes,
             "weights": report.weights_bytes, "inputs": report.inputs_bytes,
             "optimizer state": report.optimizer_state_bytes}
    where = "--memory-budget" if budget is not None else "this machine's memory"
    raise MemoryBudgetError(
        f"{report.model} at batch {report.batch}: the plan predicts a peak of "
        f"{fmt(report.predicted_peak_bytes)} ("
        + ", ".join(f"{name} {fmt(nbytes)}" for name, nbytes in parts.items() if nbytes)
        + f"), more than {fmt(limit)} ({where}); nothing was run: use a smaller --batch, or "
        f"--no-measure to see the plan")


def build_report(args: argparse.Namespace):
    from portable import memory

    run = not args.no_measure
    if args.mirror and not args.train:
        raise PortableError("--mirror recomputes forward values for the backward pass: it "
                            "needs --train")
    if args.batch is not None and args.batch < 1:
        raise PortableError(f"--batch must be positive, got {args.batch}")
    is_file = args.model.endswith(".onnx") or os.path.sep in args.model
    if is_file and not os.path.exists(args.model):
        raise PortableError(f"model file {args.model!r} does not exist")
    label = os.path.basename(args.model)
    if args.train:
        if is_file:
            graph, params = load_onnx(args.model, True, args.batch)
        else:
            graph, params = memory.builtin_training_graph(args.model, args.batch or 1)

        def profile(measure: bool):
            return memory.training_profile(graph, params, model=label, batch=args.batch,
                                           strategy=args.strategy, use_mirror=args.mirror,
                                           run=measure)
    else:
        if is_file:
            graph, _ = load_onnx(args.model, False)
        else:
            graph = memory.builtin_prediction_graph(args.model, args.batch or 1)

        def profile(measure: bool):
            return memory.prediction_profile(graph, model=label, batch=args.batch,
                                             level=args.optimize, strategy=args.strategy,
                                             run=measure)
    report = profile(False)
    if not run:
        return report
    # Planning allocates nothing; measuring allocates the plan: check it first. (The plan is
    # made again with the measurement, which keeps the profile functions one call each.)
    check_predicted(report, getattr(args, "memory_budget", None))
    return profile(True)


def _table(report) -> str:
    rows = [("naive (every value its own block)", report.naive_bytes),
            ("in-place only", report.inplace_bytes),
            ("co-share only", report.coshare_bytes),
            ("both (in-place + co-share)", report.both_bytes),
            ("liveness lower bound", report.lower_bound_bytes)]
    what = "training step" if report.train else "prediction"
    lines = [f"{report.model}: {what}, batch {report.batch}, {report.steps} kernel calls, "
             f"strategy {report.strategy}", "",
             "planned memory of intermediates and outputs:"]
    lines += [f"  {name:<36} {nbytes / MB:>10.2f} MiB" for name, nbytes in rows]
    lines.append(f"  naive / planned: {report.naive_bytes / max(report.planned_bytes, 1):.1f}x;"
                 f" planned / bound: {report.planned_bytes / max(report.lower_bound_bytes, 1):.3f}")
    lines += ["", "by category (activations and gradients: alive at the plan's peak step):"]
    lines += [f"  {name:<36} {nbytes / MB:>10.2f} MiB" for name, nbytes in
              report.categories.items()]
    mirror = report.extra.get("mirror")
    if mirror:
        lines += ["", f"mirror: {mirror['saved_bytes'] / MB:.1f} MiB less than without "
                      f"({mirror['planned_bytes_without_mirror'] / MB:.1f} MiB), "
                      f"recomputing {mirror['recomputed_nodes']} nodes "
                      f"({100 * mirror['extra_forward_nodes_ratio']:.0f}% of the forward pass)"]
    tensors = report.extra.get("tensors")
    if tensors and (tensors["runtime"] or tensors["planned_per_shape"]):
        lines += ["", "planned in segments (values decide some shapes): the figures above are "
                      "the first segment's",
                  f"  planned (in an arena): {len(tensors['planned'])} tensors",
                  f"  planned per shape, by later segments: "
                  f"{', '.join(tensors['planned_per_shape']) or '-'}",
                  f"  allocated at run time: {', '.join(tensors['runtime'])}"]
    elif tensors:
        lines += ["", f"every tensor planned ahead ({len(tensors['planned'])}); none "
                      f"allocated at run time"]
    lines.append("")
    lines.append(f"predicted peak (plan + weights + optimizer state + inputs + workspace): "
                 f"{report.predicted_peak_bytes / MB:.2f} MiB")
    if report.measured_peak_bytes is not None:
        ratio = report.measured_peak_bytes / max(report.predicted_peak_bytes, 1)
        lines.append(f"measured peak (tracemalloc): {report.measured_peak_bytes / MB:.2f} MiB "
                     f"({ratio:.3f}x predicted), run {report.measured['seconds']:.3f} s")
        planned = {"weights": report.weights_bytes,
                   "optimizer_state": report.optimizer_state_bytes, "inputs": report.inputs_bytes,
                   "compiled (arena + workspace)": report.planned_bytes
                   + report.workspace_bytes, "unplanned": 0}
        lines += ["", f"  {'':<36} {'predicted':>14} {'measured':>14}"]
        lines += [f"  {name:<36} {planned[name] / MB:>10.2f} MiB {nbytes / MB:>10.2f} MiB"
                  for name, nbytes in report.measured["categories"].items()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = build_report(args)
    if args.plot:
        from portable.memory.plot import plot_timeline

        plot_timeline(report, args.plot)
    if args.json:
        print(json.dumps(report.to_json(), sort_keys=True))
    else:
        print(_table(report))
        if args.plot:
            print(f"timeline written to {args.plot}")
    sys.stdout.flush()
    return 0
