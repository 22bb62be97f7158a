"""Family kernels: one compiled kernel serves every table op of an arity and a type signature.

PoCL (and other OpenCL compilers) take a fraction of a second per program and again per
kernel on first launch, and a network uses dozens of elementwise ops in several dtypes. So a
single-op elementwise call does not get a kernel of its own: it runs the family kernel of its
(arity, operand dtypes, compute dtype, output dtype), which holds a ``switch`` over every op
of the table valid for that compute type, each case generated from the op's C expression.
Operands an op keeps in their own type (Where's condition, Pow's exponent) are converted to
the compute type, which the expression reads the same way. The op code and attribute values
are kernel arguments; the branch is uniform across work-items, so it costs nothing
measurable (compilers unswitch it out of the loop). Operands may be arrays or host scalars
(a flag chooses), so scalar/array mixes share the kernel too. The flat and strided layouts
are two kernels of one program. Fused multi-op expressions get a kernel of their own
(``codegen``). ``elementwise.run_elementwise`` chooses between the two.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from backends.opencl.codegen import (flat_index, int8_arg, literals, strided_index,
                                     strided_layout)
from backends.opencl.launch import Launch
from backends.opencl.optable import TABLE
from backends.opencl.scalars import CType, ctype, preamble

_PARAMS = 3  # float attributes a family op may take (p0, p1, p2)
# Ops frequent enough (copies, arithmetic, activations, masks) to get their own element loop
_HOT = ("Identity", "Add", "Sub", "Mul", "Div", "Max", "Min", "Neg", "Relu", "Where",
        "Greater", "Less", "Equal", "Exp", "Sqrt")


def family_ops(arity: int, compute: CType) -> list[str]:
    """The ops (in op-code order) of the family of ``arity`` computing in ``compute``."""
    kind = compute.dtype.kind
    return [name for name, op in TABLE.items()
            if op.arity == arity and op.result in ("promote", "bool", "first")
            and kind in op.kinds]


def family_source(arity: int, storages: Sequence[CType], compute: CType, out: CType,
                  per: int = 1) -> str:
    """Both layouts' kernels (``family_flat``, ``family_strided``) of one family; a flat
    work-item handles ``per`` elements."""
    flat = _family_kernel(arity, storages, compute, out, True, per)
    strided = _family_kernel(arity, storages, compute, out, False, per)
    helpers = []
    for name in family_ops(arity, compute):
        if TABLE[name].helpers and TABLE[name].helpers not in helpers:
            helpers.append(TABLE[name].helpers)
    dtypes = [c.dtype for c in storages] + [compute.dtype, out.dtype]
    return preamble(dtypes) + "\n".join(helpers) + flat + strided


def _family_kernel(arity, storages, compute, out, flat, per) -> str:
    """One layout's kernel: a switch over the op code, hot ops each with their own element
    loop (a plain loop the compiler vectorises), the others in one loop switching inside."""
    ct = compute.compute
    names = ["y"] + [f"x{i}" for i in range(arity)]
    params = ["const int n"]
    if not flat:
        params += ["const int rank", "const int8 shape", "const int segs", "const int inner"]
        extra, prologue, loop = strided_index(names)
        slots = dict(zip(names, zip(extra[::2], extra[1::2])))
    params += [f"__global {out.storage}* y", "const int y_off"]
    params += [] if flat else list(slots["y"])
    for i, c in enumerate(storages):
        params += [f"__global const {c.storage}* x{i}", f"const int x{i}_off"]
        params += [f"const int x{i}_step"] if flat else list(slots[f"x{i}"])
        params += [f"const {ct} s{i}", f"const int k{i}"]
    params += ["const int op", f"const {ct} p0", f"const {ct} p1", f"const {ct} p2"]
    body = ["const int i = get_global_id(0);"]
    if flat:
        head = flat_index(["y"], [f"x{i}" for i in range(arity)], per)
    else:
        body += ["if (i >= n) return;", prologue]
        head = loop
    loads = " ".join(f"const {ct} v{i} = k{i} ? s{i} : ({ct}){c.load(f'x{i}', f'x{i}_i')};"
                     for i, c in enumerate(storages))
    values = {}
    for code, name in enumerate(family_ops(arity, compute)):
        op = TABLE[name]
        template = literals(op.template([compute] * arity), compute)
        values[code] = (name, template.format(*[f"v{i}" for i in range(arity)],
                                              **{p: f"p{j}" for j, p in enumerate(op.params)}))
    store = out.store("y", "y_i", "t")
    # The hot ops of the flat layout get a loop each (vectorisable); every other op shares one
    # loop that switches per element, which keeps the program (and its compile time) small.
    own = {code for code, (name, _) in values.items() if flat and name in _HOT}
    shared = " ".join(f"case {code}: t = ({ct})({expr}); break;"
                      for code, (_, expr) in values.items() if code not in own)
    cases = [f"case {code}: {{ {head} {loads} const {ct} t = ({ct})({values[code][1]}); "
             f"{store}; }} break; }}" for code in sorted(own)]
    cases.append(f"default: {{ {head} {loads} {ct} t = 0; switch (op) {{ {shared} }} "
                 f"{store}; }} }}")
    body.append("switch (op) {\n    " + "\n    ".join(cases) + "\n  }")
    name = "family_flat" if flat else "family_strided"
    return (f"\n__kernel void {name}(" + ", ".join(params) + ") {\n  " + "\n  ".join(body)
            + "\n}\n")


def _compute_dtype(op_name: str, ops, result_dtype: np.dtype) -> np.dtype:
    op = TABLE[op_name]
    if op.result == "bool":
        values = [o.dtype if o.is_array else o.value for o in ops]
        return np.dtype(np.result_type(*values))
    return result_dtype


def family_launch(runtime: Any, op_name: str, op_params: Sequence[float], ops, step_dtype,
                  out, dims, strides, flat: bool) -> Launch:
    """The launch of the family kernel for ``op_name`` (operands already laid out by
    codegen; array 0 is ``out``, then the array operands)."""
    compute = ctype(_compute_dtype(op_name, ops, np.dtype(step_dtype)))
    if op_name == "Identity":
        compute = ctype(out.dtype)
    storages = [ctype(o.dtype) if o.is_array else compute for o in ops]
    key = (len(ops), tuple(c.dtype for c in storages), compute.dtype, out.dtype, flat)
    memo = runtime.memo("family_kernels")
    entry = memo.get(key)
    if entry is None:
        source = family_source(len(ops), storages, compute, ctype(out.dtype),
                               runtime.per_item)
        codes = {name: k for k, name in enumerate(family_ops(len(ops), compute))}
        name = "family_flat" if flat else "family_strided"
        entry = memo[key] = (runtime.kernel(source, name), codes)
    kernel, codes = entry
    count = -(-out.size // runtime.per_item)
    if not flat:
        count, head, per_array = strided_layout(dims, strides)
    launch = Launch.flat(runtime, kernel, count)
    launch.add(np.int32(out.size if flat else count), *([] if flat else head))
    launch.array(0, out)
    launch.add(*([] if flat else per_array[0]))
    k = 1
    for operand in ops:
        if operand.is_array:
            launch.array(k, operand.value)
            launch.add(*([np.int32(1 if operand.mode == "c" else 0)] if flat
                         else per_array[k]))
            launch.add(compute.scalar(0), np.int32(0))
            k += 1
        else:  # an unread buffer argument, then the scalar
            launch.array(0, out, offset=False)
            launch.add(np.int32(0), *([np.int32(0)] if flat else [int8_arg(()), np.int32(0)]))
            launch.add(compute.scalar(operand.value), np.int32(1))
    params = list(op_params) + [0.0] * (_PARAMS - len(op_params))
    launch.add(np.int32(codes[op_name]), *[compute.scalar(p) for p in params])
    return launch
