"""The C renderer of elementwise work: the op description and the OpenCL C it becomes.

An ``EwOp`` is one elementwise op as a C expression (the table of them is ``optable``); a
``Step`` applies one to operands or earlier steps, and a list of steps (built with ``Fused``)
is one fused expression. This module gives each step its dtype (NumPy promotion with Python
scalars weak, bool for comparisons, ...) and renders the program of an expression
(``elementwise_source``) with the layout code that ``families`` shares:

- ``flat`` when the output is contiguous and every operand contiguous or a single element (a
  work-item takes ``runtime.per_item`` consecutive elements: CPU runtimes pay per work-item);
- ``strided`` otherwise (a work-item decodes its row over up to 8 outer axes once, then walks
  up to CHUNK elements of the innermost axis).

Shapes, strides and attribute values are kernel arguments, never part of the source, so one
compiled kernel serves every shape. Launching is ``elementwise.run_elementwise``; this module
knows no device array.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from portable.errors import BackendError

from backends.opencl.scalars import CType, ctype, preamble

MAX_RANK = 8
_LITERAL = re.compile(r"L\((-?[0-9.]+(?:e-?[0-9]+)?)\)")


def literals(template: str, compute: CType) -> str:
    """``template`` with each ``L(0.5)`` written as a C literal of the ``compute`` type."""
    return _LITERAL.sub(lambda m: compute.literal(float(m.group(1))), template)


@dataclass(frozen=True)
class EwOp:
    """One elementwise op: a C expression over operands ``{0}``, ``{1}``, ... and named
    parameters ``{alpha}``... (kernel arguments); ``L(0.5)`` is a literal of the compute type.

    Args:
        expr: the template, or a function of the operands' CTypes returning one.
        arity: number of operands.
        result: "promote" (NumPy promotion of the promoted operands), "bool", "first" (the
            first operand's dtype), "float32" or "given" (the output's dtype: casts).
        promote: operands converted to the common compute type (default: all); the others
            keep their own (a condition, an integer exponent, a cast's source).
        params: names of float parameters.
        helpers: C functions the expression calls.
    """

    name: str
    expr: str | Callable[..., str]
    arity: int
    result: str = "promote"
    promote: tuple[int, ...] | None = None
    params: tuple[str, ...] = ()
    helpers: str = ""
    kinds: str = "biuf"  # dtype kinds of the compute type the template is valid for

    def template(self, types: Sequence[CType]) -> str:
        return self.expr(*types) if callable(self.expr) else self.expr


@dataclass(frozen=True)
class Step:
    """One op of a fused expression; ``args`` are ("in", k) operands or ("t", j) steps."""

    op: EwOp
    args: tuple[tuple[str, int], ...]
    params: tuple[float, ...] = ()


@dataclass
class Operand:
    """One operand of an elementwise launch as the renderer sees it (filled in by
    ``elementwise.run_elementwise``)."""

    value: Any                 # a CLArray or a host scalar
    is_array: bool
    dtype: np.dtype | None = None
    mode: str = "k"            # k: scalar argument, c: contiguous, b: one element, s: strided
    strides: tuple[int, ...] = ()
    offset: int = 0


def _weak(value: Any) -> Any:
    """What np.result_type sees for a host scalar (Python scalars stay weak)."""
    if isinstance(value, np.ndarray):
        return value.dtype
    return value


def step_dtypes(steps: Sequence[Step], operands: Sequence[Operand],
                 out_dtypes: Sequence[np.dtype | None]) -> list[np.dtype]:
    """The result dtype of every step (the last ones may be fixed by their outputs)."""
    types: list[np.dtype] = []
    final = {len(steps) - len(out_dtypes) + k: d for k, d in enumerate(out_dtypes)}
    for j, step in enumerate(steps):
        op = step.op
        refs = [_ref_value(ref, operands, types) for ref in step.args]
        chosen = op.promote if op.promote is not None else range(op.arity)
        promoted = [refs[k] for k in chosen]
        if op.result == "given":
            dtype = final.get(j)
            if dtype is None:
                raise BackendError(f"elementwise {op.name}: the output dtype must be given")
        elif op.result == "bool":
            dtype = np.dtype(np.bool_)
        elif op.result == "float32":
            dtype = np.dtype(np.float32)
        elif op.result == "first":
            dtype = _as_dtype(refs[0])
        else:
            dtype = np.result_type(*promoted) if promoted else final.get(j)
        types.append(np.dtype(dtype))
    return types


def _ref_value(ref, operands, types):
    kind, index = ref
    if kind == "t":
        return types[index]
    operand = operands[index]
    return operand.dtype if operand.is_array else _weak(operand.value)


def _as_dtype(value: Any) -> np.dtype:
    return value if isinstance(value, np.dtype) else np.result_type(value)


def compute_dtype(steps, operands, types, j) -> np.dtype:
    """The dtype the promoted operands of step ``j`` are computed in."""
    step = steps[j]
    if step.op.result != "bool":
        return types[j]
    chosen = step.op.promote if step.op.promote is not None else range(step.op.arity)
    refs = [_ref_value(step.args[k], operands, types) for k in chosen]
    return np.dtype(np.result_type(*refs)) if refs else types[j]


def collapse(shape: Sequence[int], strides_list: Sequence[Sequence[int]]):
    """Drop size-1 axes and merge neighbours that are contiguous for every operand."""
    dims = [(d, [s[i] for s in strides_list]) for i, d in enumerate(shape) if d != 1]
    merged: list[tuple[int, list[int]]] = []
    for dim, strides in dims:
        if merged:
            prev_dim, prev_strides = merged[-1]
            if all(p == s * dim for p, s in zip(prev_strides, strides)):
                merged[-1] = (prev_dim * dim, strides)
                continue
        merged.append((dim, strides))
    new_shape = [d for d, _ in merged]
    new_strides = [[s[k] for _, s in merged] for k in range(len(strides_list))]
    return new_shape, new_strides


CHUNK = 32  # elements of the innermost axis one work-item of a strided kernel walks


def peel_axes(counter: str, rank: str, shape: str, updates: Callable[[int], str]) -> str:
    """C that splits the index ``counter`` (a variable, consumed) over the first ``rank``
    axes of the ``int8`` ``shape``, last axis fastest: for each axis d, ``c`` is its
    coordinate and ``updates(d)`` the statements that use it (offsets += c * strides.sd)."""
    return " ".join(
        f"if ({rank} > {d}) {{ const int q = {counter} / {shape}.s{d}; "
        f"const int c = {counter} - q * {shape}.s{d}; {counter} = q; {updates(d)} }}"
        for d in reversed(range(MAX_RANK)))


def strided_index(names: Sequence[str]) -> tuple[list[str], str, str]:
    """Code of the strided layout: each work-item decodes its row over the outer axes once
    (divisions), then walks up to CHUNK elements of the innermost axis by stride steps.

    Returns the extra kernel parameters of each indexed array (``{name}_st`` for the outer
    axes, ``{name}_in`` for the innermost), the prologue, and the loop header; the loop body
    reads ``{name}_i``."""
    params = [p for name in names for p in (f"const int8 {name}_st", f"const int {name}_in")]
    lines = ["const int seg = i % segs, row = i / segs;", "int r = row;"]
    lines += [f"int {name}_b = {name}_off;" for name in names]
    lines.append(peel_axes("r", "rank", "shape", lambda d: " ".join(
        f"{name}_b += c * {name}_st.s{d};" for name in names)))
    loop = (f"for (int j = seg * {CHUNK}; j < min(seg * {CHUNK} + {CHUNK}, inner); ++j) {{ "
            + " ".join(f"const int {name}_i = {name}_b + j * {name}_in;" for name in names))
    return params, " ".join(lines), loop


def flat_index(outs: Sequence[str], ins: Sequence[str], per: int) -> str:
    """The loop header of the flat layout: a work-item takes ``per`` consecutive elements;
    outputs are contiguous, inputs contiguous (step 1) or one element (step 0)."""
    return (f"if (i * {per} >= n) return; "
            f"for (int e = i * {per}; e < min(i * {per} + {per}, n); ++e) {{ "
            + " ".join(f"const int {y}_i = {y}_off + e;" for y in outs) + " "
            + " ".join(f"const int {x}_i = {x}_off + e * {x}_step;" for x in ins))


def strided_layout(dims: Sequence[int], strides: Sequence[Sequence[int]]):
    """Launch arguments of the strided layout: work-items, the outer-axis (rank, shape) and
    (segments, inner size), and per array its (outer strides, inner stride)."""
    dims = list(dims) or [1]
    strides = [list(s) or [0] for s in strides]
    inner, segs = dims[-1], -(-dims[-1] // CHUNK)
    rows = math.prod(dims[:-1])
    head = [np.int32(len(dims) - 1), int8_arg(dims[:-1]), np.int32(segs), np.int32(inner)]
    per_array = [(int8_arg(s[:-1]), np.int32(s[-1])) for s in strides]
    return rows * segs, head, per_array


_INT8_CACHE: dict[tuple, Any] = {}


def int8_arg(values: Sequence[int]) -> Any:
    """An OpenCL ``int8`` kernel argument (unused lanes 0). Cached: arguments are read-only."""
    key = tuple(values)
    hit = _INT8_CACHE.get(key)
    if hit is None:
        import pyopencl.cltypes as cltypes

        if len(_INT8_CACHE) > 4096:
            _INT8_CACHE.clear()
        hit = _INT8_CACHE[key] = np.array(key + (0,) * (MAX_RANK - len(key)),
                                          dtype=cltypes.int8)
    return hit


def operand_ctypes(steps, ops, types) -> list[CType]:
    """The C type a scalar operand is passed as: the compute type of its first use."""
    result: list[CType | None] = [None] * len(ops)
    for j, step in enumerate(steps):
        chosen = step.op.promote if step.op.promote is not None else range(step.op.arity)
        for k, (kind, index) in enumerate(step.args):
            if kind == "in" and result[index] is None and not ops[index].is_array:
                dtype = compute_dtype(steps, ops, types, j) if k in chosen else \
                    _as_dtype(_weak(ops[index].value))
                result[index] = ctype(dtype)
    return [r or ctype(np.float32) for r in result]


def elementwise_source(steps, ops, types, out_dtypes, per: int = 1) -> str:
    """The OpenCL C source of one (fused) elementwise expression: kernels ``ew_flat`` (every
    operand contiguous or one element: a step of 1 or 0 per operand) and ``ew_strided``. The
    last ``len(out_dtypes)`` steps are stored, converted to the outputs' dtypes."""
    n_out = len(out_dtypes)
    out_types = [ctype(t) for t in out_dtypes]
    scalar_types = operand_ctypes(steps, ops, types)
    compute = [ctype(compute_dtype(steps, ops, types, j)) for j in range(len(steps))]
    helpers, lines = [], []
    for i, operand in enumerate(ops):
        if operand.is_array:
            c = ctype(operand.dtype)
            lines.append(f"const {c.compute} v{i} = {c.load(f'x{i}', f'x{i}_i')};")
        else:
            lines.append(f"const {scalar_types[i].compute} v{i} = s{i};")
    for j, step in enumerate(steps):
        op = step.op
        chosen = op.promote if op.promote is not None else range(op.arity)
        arg_types, names = [], []
        for k, (kind, index) in enumerate(step.args):
            name = f"v{index}" if kind == "in" else f"t{index}"
            if k in chosen:
                names.append(f"(({compute[j].compute}){name})")
                arg_types.append(compute[j])
            else:
                names.append(name)
                src_dtype = ops[index].dtype if kind == "in" and ops[index].is_array else (
                    types[index] if kind == "t" else scalar_types[index].dtype)
                arg_types.append(ctype(src_dtype))
        template = literals(op.template(arg_types), compute[j])
        expr = template.format(*names, **{p: f"p{j}_{p}" for p in op.params})
        result = ctype(types[j])
        if op.result == "given" and types[j] == np.bool_:
            expr = f"({expr}) != 0"  # (a conversion to bool is a test, as in NumPy: 0.5 is True)
        lines.append(f"const {result.compute} t{j} = ({result.compute})({expr});")
        if op.helpers and op.helpers not in helpers:
            helpers.append(op.helpers)
    for k, c in enumerate(out_types):
        lines.append(c.store(f"y{k}", f"y{k}_i", f"t{len(steps) - n_out + k}") + ";")
    dtypes = [o.dtype for o in ops if o.is_array] + list(types) + list(out_dtypes)
    kernels = [_elementwise_kernel(name, flat, ops, out_types, scalar_types, compute, steps,
                                   lines, per) for name, flat in (("ew_flat", True),
                                                                  ("ew_strided", False))]
    return preamble(dtypes) + "\n".join(helpers) + "".join(kernels)


def _elementwise_kernel(name, flat, ops, out_types, scalar_types, compute, steps, lines,
                        per):
    outs = [f"y{k}" for k in range(len(out_types))]
    ins = [f"x{i}" for i, o in enumerate(ops) if o.is_array]
    params = ["const int n"]
    if not flat:
        params += ["const int rank", "const int8 shape", "const int segs", "const int inner"]
        extra, prologue, loop = strided_index(outs + ins)
        per = dict(zip(outs + ins, zip(extra[::2], extra[1::2])))
    for k, c in enumerate(out_types):
        params += [f"__global {c.storage}* y{k}", f"const int y{k}_off"]
        if not flat:
            params += list(per[f"y{k}"])
    for i, operand in enumerate(ops):
        if operand.is_array:
            c = ctype(operand.dtype)
            params += [f"__global const {c.storage}* x{i}", f"const int x{i}_off"]
            params += [f"const int x{i}_step"] if flat else list(per[f"x{i}"])
        else:
            params.append(f"const {scalar_types[i].compute} s{i}")
    for j, step in enumerate(steps):
        params += [f"const {compute[j].compute} p{j}_{p}" for p in step.op.params]
    body = ["const int i = get_global_id(0);"]
    if flat:
        body += [flat_index(outs, ins, per)] + lines + ["}"]
    else:
        body += ["if (i >= n) return;", prologue, loop] + lines + ["}"]
    return (f"\n__kernel void {name}(" + ", ".join(params) + ") {\n  " +
            "\n  ".join(body) + "\n}\n")


@dataclass
class Fused:
    """A fused elementwise expression built step by step (what a fusion pass compiles).

    Example:
        >>> f = Fused(2)
        >>> t = f.add(TABLE["Mul"], f.input(0), f.input(1))
        >>> f.add(TABLE["Relu"], t)                          # doctest: +SKIP
    """

    inputs: int
    steps: list[Step] = field(default_factory=list)

    def input(self, k: int) -> tuple[str, int]:
        return ("in", k)

    def add(self, op: EwOp, *args: tuple[str, int], params: Sequence[float] = ()):
        if len(args) != op.arity:
            raise BackendError(f"{op.name} takes {op.arity} operands, got {len(args)}")
        self.steps.append(Step(op, tuple(args), tuple(params)))
        return ("t", len(self.steps) - 1)
