"""Measure the memory a planned run really holds, with ``tracemalloc`` (NumPy reports its
array buffers to it).

Stages of ``measure``: start tracing; upload the weights and inputs (fresh copies, so that they
are traced as a device's copies would be); compile the graph (arena and scratch allocated);
reset the peak; run once; the peak is everything traced alive at the fullest moment of the run:
weights, inputs, the arena, the scratch and whatever a kernel allocates for itself.

Example:
    >>> result = measure(graph, {"x": x})   # doctest: +SKIP
    >>> result["measured_peak_bytes"]       # doctest: +SKIP
"""
from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any, Iterable, Mapping

import numpy as np

from portable.device import Device, cpu
from portable.ir.graph import Graph


def _upload(array: np.ndarray) -> np.ndarray:
    copy = np.array(array, copy=True, order="C")
    copy.setflags(write=False)  # the Graph keeps read-only arrays as they are, without a copy
    return copy


def measure(graph: Graph, feeds: Mapping[str, np.ndarray], *, device: Device | None = None,
            strategy: str = "both", state_updates: Mapping[str, str] | None = None,
            keep: Iterable[str] = (), repeats: int = 1,
            categories: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``graph`` planned with ``strategy`` and measure its peak traced memory.

    Args:
        graph: the graph.
        feeds: a NumPy array per graph input.
        device: where to run (a NumPy-backed device: tracemalloc sees host memory only).
        strategy, state_updates, keep: as ``CompiledGraph``.
        repeats: runs (the peak is over all of them; the time is the fastest).
        categories: category of each fed input (default ``inputs``): fed weights and
            optimizer state are measured under their category.

    Returns:
        ``measured_peak_bytes`` (the whole run), ``resident_before_run_bytes`` (weights, inputs,
        arena and workspace once compiled), ``seconds``, and ``categories``: the traced bytes
        of the uploaded weights (constants and fed), optimizer state and other inputs, of what
        compiling allocated (the arena and the workspace buffers) and of what the kernels
        allocated beyond that during the run (``unplanned``: temporaries no workspace rule
        declares).
    """
    from portable.executor.compiled import CompiledGraph

    device = device or cpu()
    if tracemalloc.is_tracing():
        raise RuntimeError("measure() needs tracemalloc, which is already tracing")
    # Planned once untraced first: what the process pays once on first use (imports, compiled
    # kernels loaded from their disk cache) is not this plan's memory.
    CompiledGraph(graph, device, plan=strategy, keep=keep, state_updates=state_updates)
    gc.collect()
    tracemalloc.start()
    try:
        weights = {name: _upload(value) for name, value in graph.initializers.items()}
        uploaded = graph.replace(initializers=weights)
        measured = {"weights": tracemalloc.get_traced_memory()[0], "optimizer_state": 0,
                    "inputs": 0}
        arrays = {}
        for name, value in feeds.items():
            before = tracemalloc.get_traced_memory()[0]
            arrays[name] = np.array(value, copy=True, order="C")
            kind = (categories or {}).get(name, "inputs")
            kind = kind if kind in measured else "inputs"
            measured[kind] += tracemalloc.get_traced_memory()[0] - before
        before = tracemalloc.get_traced_memory()[0]
        compiled = CompiledGraph(uploaded, device, plan=strategy, keep=keep,
                                 state_updates=state_updates)
        gc.collect()
        resident = tracemalloc.get_traced_memory()[0]
        measured["compiled (arena + workspace)"] = resident - before
        tracemalloc.reset_peak()
        seconds = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            compiled.run(arrays)
            seconds = min(seconds, time.perf_counter() - start)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    measured["unplanned"] = peak - resident
    return {"measured_peak_bytes": int(peak), "resident_before_run_bytes": int(resident),
            "seconds": seconds, "categories": {k: int(v) for k, v in measured.items()}}
