"""NumPy kernels of the fused private ops (``portable/ops/fused.py``).

``portable.FusedElementwise``: each distinct body is compiled once into a list of calls of the
backend's own elementwise kernels, every one writing into the output buffer (``out=``), so the
chain makes no temporary the size of the output. The op declarations guarantee that each step
after the first may overwrite the previous step's result in place. Should the planner have put
the output over an input that a later step still reads (the fused op's in-place pair), that
input is copied first.

``portable.FusedConv`` / ``portable.FusedGemm``: the backend's Conv or Gemm kernel, then its
Add of FusedConv's residual ``Z`` and the activation kernel (with Clip's bounds as 0-d arrays
made once per plan step), each in place on the result (``composed_kernel``).

Kernels declare the scratch they need through a ``workspace`` attribute (see
``portable.executor.compiled``): FusedConv declares the buffers its Conv kernel takes from
``ctx.workspace`` (the padded input and the im2col columns), so that the executor allocates
them once, at their planned size, and the memory plan counts them.
"""
from __future__ import annotations

import functools
import math

from portable.ir.graph import Node
from portable.ops import registry
from portable.ops.conv import window_geometry
from portable.ops.fused import composed_kernel, parse_body

from portable.backend import kernel_table

kernels, kernel = kernel_table()


@functools.lru_cache(maxsize=1024)
def _program(body: str):
    """The steps ``(op name, input refs, resolved attrs)``, and the inputs that must not
    share the output's memory: those read after step 0, or by step 0 through an input its op
    does not pair in place with its output."""
    program, guarded = [], set()
    for index, (op_name, refs, attrs) in enumerate(parse_body(body)):
        op = registry.get(op_name)
        node = Node(op_name, tuple(f"in{i}" for i in range(len(refs))), ("out",), dict(attrs),
                    f"fused/{op_name}{index}")
        inplace = {i for i, o in op.inplace if o == 0}
        guarded.update(r for j, r in enumerate(refs) if r >= 0 and (index or j not in inplace))
        program.append((op_name, refs, op.resolve_attrs(node)))
    return tuple(program), frozenset(guarded)


@kernel("portable.FusedElementwise")
def fused_elementwise(ctx, inputs, outputs, attrs):
    xp, out = ctx.xp, outputs[0]
    program, guarded = _program(attrs["body"])
    inputs = list(inputs)
    for i in guarded:
        if xp.may_share_memory(inputs[i], out):
            inputs[i] = inputs[i].copy()
    backend = ctx.backend
    for op_name, refs, step_attrs in program:
        backend.kernel(op_name)(ctx, [out if r < 0 else inputs[r] for r in refs], [out],
                                step_attrs)


def conv_workspace(input_types, output_types, attrs) -> dict[str, int]:
    """The scratch the NumPy Conv kernel takes from ``ctx.workspace`` (see
    ``backends/xp/kernels/im2col.scratch``): the padded input under ``padded`` (when the
    windows reach into padding) and the im2col columns under ``columns`` (unless the Conv is
    pointwise)."""
    x, w = input_types[0], input_types[1]
    geom = window_geometry(x.shape[2:], w.shape[2:], attrs)
    itemsize = x.dtype.itemsize
    n, c = x.shape[:2]
    need = {}
    tail = geom.fit_tail(x.shape[2:])
    if any(geom.head) or any(t > 0 for t in tail):
        padded = [d + h + t for d, h, t in zip(x.shape[2:], geom.head, tail)]
        need["padded"] = n * c * math.prod(padded) * itemsize
    pointwise = (all(k == 1 for k in geom.kernel) and all(s == 1 for s in geom.strides)
                 and not any(geom.head) and tuple(geom.out) == tuple(x.shape[2:]))
    if not pointwise:
        need["columns"] = n * c * math.prod(geom.kernel) * math.prod(geom.out) * itemsize
    return need


fused_conv = kernel("portable.FusedConv")(composed_kernel("Conv"))
fused_conv.workspace = conv_workspace
kernel("portable.FusedGemm")(composed_kernel("Gemm"))
