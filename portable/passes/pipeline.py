"""The optimisation pipeline: one flat, named list of passes that reads top to bottom.

Levels, as ONNX Runtime's: ``none`` runs nothing; ``basic`` runs the rewrites that keep every
op as it is (fold constants, prune, merge duplicates, drop no-ops); ``all`` adds the fusions
that create private ops and fold parameters (Conv+BatchNormalization, Conv/Gemm+activation,
elementwise chains). In debug mode the graph is verified (structure and types) after every
pass; a failure names the pass and the passes that ran before it.

Example:
    >>> optimized = optimize(graph, "all")              # doctest: +SKIP
    >>> optimized = optimize(graph, "all", debug=True)  # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from portable.errors import GraphError, PortableError
from portable.ir.graph import Graph, TensorType
from portable.passes import inference_rewrites as rules
from portable.passes.cse import eliminate_common_subexpressions
from portable.passes.fold_constants import fold_constants
from portable.passes.pack_weights import pack_sub_byte_weights
from portable.passes.fuse_elementwise import fuse_elementwise
from portable.passes.matmul_add_gemm import MATMUL_ADD_AS_GEMM
from portable.passes.prune import prune
from portable.passes.rewriter import rewrite
from portable.passes.unit_transposes import UNIT_TRANSPOSES
from portable.passes.verify import verify

LEVELS = ("none", "basic", "all")


@dataclass(frozen=True)
class Pass:
    """One pipeline entry: a name, the lowest level that runs it, the function and why."""

    name: str
    level: str
    run: Callable[[Graph, tuple[str, ...]], Graph]  # (graph, protected values) -> graph
    why: str


PIPELINE: tuple[Pass, ...] = (
    Pass("pack-sub-byte-weights", "basic", lambda g, keep: pack_sub_byte_weights(g),
         "4- and 2-bit weights stay packed as their file stores them, unpacked per use"),
    Pass("fold-constants", "basic", lambda g, keep: fold_constants(g),
         "weights built by constant subgraphs become initializers; later passes see them"),
    Pass("prune", "basic", lambda g, keep: prune(g, keep),
         "what no output needs is never computed"),
    Pass("eliminate-common-subexpressions", "basic",
         lambda g, keep: eliminate_common_subexpressions(g, keep),
         "each distinct expression is computed once"),
    Pass("eliminate-noops", "basic", lambda g, keep: rewrite(g, rules.ELIMINATE_NOOPS, keep),
         "Identity and inference Dropout only pass their input through"),
    Pass("unit-transposes", "all", lambda g, keep: rewrite(g, UNIT_TRANSPOSES, keep),
         "a Transpose that moves only size-1 axes is a Reshape: a view, no copy"),
    Pass("matmul-add-as-gemm", "all", lambda g, keep: rewrite(g, MATMUL_ADD_AS_GEMM, keep),
         "a Linear on a stack of rows is one GEMM with its bias, not a GEMM per row block"),
    Pass("sum-of-two-as-add", "all", lambda g, keep: rewrite(g, rules.SUM_OF_TWO_AS_ADD, keep),
         "a two-input Sum is an Add, which the Conv folds and fusions know"),
    Pass("fold-into-conv", "all", lambda g, keep: rewrite(g, rules.FOLD_INTO_CONV, keep),
         "BatchNormalization and per-channel Mul/Add after a Conv cost nothing when folded"),
    Pass("batch-norm-as-affine", "all",
         lambda g, keep: rewrite(g, rules.BATCH_NORM_AS_AFFINE, keep),
         "a BatchNormalization left over is a Mul and an Add, which fuse with what follows"),
    Pass("fuse-activations", "all", lambda g, keep: rewrite(g, rules.FUSE_ACTIVATIONS, keep),
         "an activation runs in place on the Conv/Gemm result it follows"),
    Pass("select-fused-conv", "all", lambda g, keep: rewrite(g, rules.SELECT_FUSED_CONV, keep),
         "FusedConv kernels declare their workspace, so the memory plan counts it"),
    Pass("fuse-elementwise", "all", lambda g, keep: fuse_elementwise(g, keep),
         "an elementwise chain runs inside one buffer, with no temporaries"),
    Pass("prune-after-folding", "all", lambda g, keep: prune(g, keep),
         "weights that folding replaced are dropped"),
)


def optimize(graph: Graph, level: str = "all", *, debug: bool = False,
             input_types: Mapping[str, TensorType] | None = None,
             protected: Iterable[str] = (), passes: Iterable[Pass] = PIPELINE) -> Graph:
    """Run the pipeline's passes up to ``level``.

    Args:
        graph: the graph.
        level: ``none``, ``basic`` or ``all``.
        debug: verify the graph after every pass.
        input_types: concrete types that replace the declared input types first.
        protected: values that must keep their name and stay computed (besides outputs).
        passes: the pipeline (default ``PIPELINE``).

    Returns:
        The optimised graph, with the same inputs and outputs.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown optimisation level {level!r}; use one of {LEVELS}")
    if input_types:
        graph = graph.replace(inputs=tuple((name, input_types.get(name, type_))
                                           for name, type_ in graph.inputs))
    rank = LEVELS.index(level)
    keep = tuple(protected)
    history: list[str] = []
    for step in passes:
        if LEVELS.index(step.level) > rank:
            continue
        try:
            graph = step.run(graph, keep)
            if debug:
                verify(graph)
        except PortableError as exc:
            ran = ", ".join(history) or "none"
            raise GraphError(f"graph {graph.name!r}: pass {step.name!r} failed (passes run "
                             f"before it: {ran}): {exc}") from exc
        history.append(step.name)
    return graph
