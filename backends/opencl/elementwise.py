"""Elementwise launch: run a (fused) expression on device arrays, and copies built on it.

Stages of ``run_elementwise``:
1. Types: each step gets its result dtype from its op's rule (``codegen.step_dtypes``).
2. Layout: operands are broadcast (stride-0 views) to the output shape, then axes that are
   contiguous for every operand are merged, so most calls become 1-D; the layout is ``flat``
   or ``strided`` (``codegen`` explains both).
3. A single table op runs its *family* kernel (``families``: one program per type signature
   switching over every op); a fused expression gets a program of its own (both layouts),
   looked up by its signature (ops, dtypes). A strided same-type copy with long contiguous
   rows runs ``row_copy``.
4. The launch is kept for the next call with the same layout (``launch``).

Operands that alias the output with another layout are copied first (NumPy's overlap rule).
That copy is ``assign``, itself a device copy or an elementwise Cast, which is why copies,
conversions and host uploads into views live here too: ``CLArray.copy``, ``astype`` and
``fill`` (attached by ``arrayops.install_operators``) are these functions.

Example:
    >>> y = apply("Add", x, 1.0)                      # doctest: +SKIP
    >>> assign(y[:, :2], 0)                           # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from portable.errors import BackendError
from portable.shapes import broadcast_shape

from backends.opencl.allocator import (CLArray, contiguous_strides, empty, from_numpy, to_numpy,
                                       upload)
from backends.opencl.codegen import (MAX_RANK, EwOp, Operand, Step, collapse,
                                     compute_dtype, elementwise_source, operand_ctypes,
                                     step_dtypes, strided_layout)
from backends.opencl.families import family_launch
from backends.opencl.launch import Launch, keep
from backends.opencl.optable import TABLE
from backends.opencl.row_copy import row_copy_launch
from backends.opencl.scalars import ctype, storage_view_dtype


def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """The shape ``shapes`` broadcast to; a mismatch raises BackendError naming them."""
    shape = broadcast_shape(shapes)
    if shape is None:
        raise BackendError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
    return shape


def _overlaps(a: CLArray, b: CLArray) -> bool:
    """Whether two views of one buffer may touch the same elements with different layouts."""
    same = a.offset == b.offset and a.strides == b.strides and a.shape == b.shape
    if a.buffer is not b.buffer or same:
        return False

    def span(x):
        low = x.offset + sum(min(0, (d - 1) * s) for d, s in zip(x.shape, x.strides))
        high = x.offset + sum(max(0, (d - 1) * s) for d, s in zip(x.shape, x.strides))
        return low, high
    (la, ha), (lb, hb) = span(a), span(b)
    return a.size > 0 and b.size > 0 and la <= hb and lb <= ha


def run_elementwise(steps: Sequence[Step], operands: Sequence[Any],
                    outs: Sequence[CLArray | None], out_dtypes: Sequence[Any] = (),
                    runtime: Any = None) -> list[CLArray]:
    """Evaluate fused ``steps`` over ``operands``; the last ``len(outs)`` steps are written to
    ``outs`` (allocated when None). Returns the output arrays.

    A call whose layout (steps, operand dtypes, shapes and strides, scalar values, outputs)
    was seen before reuses that call's launch (``launch``); only buffers and offsets change."""
    for value in operands:
        if isinstance(value, CLArray):
            runtime = runtime or value.runtime
        elif isinstance(value, np.ndarray) and value.ndim:
            raise BackendError("host arrays must be uploaded before an elementwise op")
    for out in outs:
        if out is not None:
            runtime = runtime or out.runtime
    if runtime is None:
        raise BackendError("an elementwise op needs at least one device array")
    key = _layout_key(steps, operands, outs, out_dtypes)
    memo = runtime.memo("ew_launches")
    launch = memo.get(key) if key is not None else None
    arrays = [v for v in operands if isinstance(v, CLArray)]
    if launch is None or any(a.buffer is o.buffer and _overlaps(a, o)
                             for o in outs if o is not None for a in arrays):
        launch, results = _work_out(runtime, steps, operands, outs, out_dtypes)
        if key is not None and launch is not None:
            keep(memo, key, launch)
        return results
    results = [out if out is not None else empty(runtime, *layout)
               for out, layout in zip(outs, launch.outs)]
    for out in results:
        runtime.touch(out)
    launch.run(runtime, results + arrays)
    return results


def _layout_key(steps, operands, outs, out_dtypes) -> tuple | None:
    """What fixes an elementwise call's launch, or None when it cannot be keyed."""
    key: list[Any] = [tuple(steps), tuple(out_dtypes)]
    for value in operands:
        if isinstance(value, CLArray):
            key.append((value.dtype, value.shape, value.strides))
        else:  # a host scalar: its type and value are compiled into the arguments
            key.append((type(value), value))
    key += [None if o is None else (o.dtype, o.shape, o.strides) for o in outs]
    try:
        hash(tuple(key))
    except TypeError:
        return None
    return tuple(key)


def _work_out(runtime, steps, operands, outs, out_dtypes):
    """Run an elementwise call the long way: returns its launch (None when it cannot be
    kept: empty results, operands copied for overlapping the output) and its results."""
    ops = [Operand(v, isinstance(v, CLArray)) for v in operands]
    for operand in ops:
        if operand.is_array:
            operand.dtype = operand.value.dtype
    given = [o.dtype if o is not None else (np.dtype(d) if d is not None else None)
             for o, d in zip(outs, list(out_dtypes) + [None] * len(outs))]
    types = step_dtypes(steps, ops, given)
    arrays = [o.value for o in ops if o.is_array]
    shape = _broadcast([a.shape for a in arrays])
    results = []
    for k, out in enumerate(outs):
        if out is None:
            out = empty(runtime, shape, types[len(steps) - len(outs) + k])
        elif _broadcast([out.shape, shape]) != out.shape:
            raise BackendError(f"cannot write a {shape} result into an array of {out.shape}")
        results.append(out)
    for out in results:
        runtime.touch(out)
    shape = results[0].shape
    if results[0].size == 0:
        return None, results
    kept = True
    for operand in ops:
        if operand.is_array and any(_overlaps(operand.value, r) for r in results):
            operand.value, kept = copy(operand.value), False
    views = [r for r in results] + [o.value.broadcast_to(shape) for o in ops if o.is_array]
    dims, strides = collapse(shape, [v.strides for v in views])
    flat = all(s == list(contiguous_strides(dims)) for s in strides[:len(results)]) and all(
        s == list(contiguous_strides(dims)) or not any(s) for s in strides[len(results):])
    if len(dims) > MAX_RANK:
        raise BackendError(f"elementwise over {len(dims)} non-mergeable axes (at most "
                           f"{MAX_RANK})")
    k = len(results)
    for operand in (o for o in ops if o.is_array):
        view = views[k]
        operand.offset, operand.strides = view.offset, tuple(strides[k])
        operand.mode = ("c" if any(strides[k]) else "b") if flat else "s"
        k += 1
    family = _family_op(steps, ops, types, results)
    launch = None
    if family == "Identity" and not flat and ops[0].is_array and \
            ops[0].dtype == results[0].dtype:  # a strided copy: by rows where they are long
        launch = row_copy_launch(runtime, results[0], ops[0].value, dims, strides)
    if launch is None and family is not None:
        launch = family_launch(runtime, family, steps[0].params, ops, types[0], results[0],
                               dims, strides, flat)
    elif launch is None:
        launch = _fused_launch(runtime, steps, ops, types, results, dims, strides, flat)
    launch.outs = [(r.shape, r.dtype) for r in results]
    launch.run(runtime, results + [o.value for o in ops if o.is_array])
    return (launch if kept else None), results


def _fused_launch(runtime, steps, ops, types, results, dims, strides, flat) -> Launch:
    """The launch of a fused expression's own kernel (arrays: results, then operands)."""
    signature = (tuple((s.op.name, s.args, len(s.params)) for s in steps),
                 tuple(o.dtype.name if o.is_array else None for o in ops),
                 tuple(t.name for t in types), tuple(r.dtype.name for r in results), flat)
    kernel = _kernel(runtime, signature, steps, ops, types, [r.dtype for r in results], flat)
    count = -(-results[0].size // runtime.per_item)
    if not flat:
        count, head, per_array = strided_layout(dims, strides)
    launch = Launch.flat(runtime, kernel, count)
    launch.add(np.int32(results[0].size if flat else count), *([] if flat else head))
    for k, out in enumerate(results):
        launch.array(k, out)
        launch.add(*([] if flat else per_array[k]))
    compute = [ctype(compute_dtype(steps, ops, types, j)) for j in range(len(steps))]
    scalar_types = operand_ctypes(steps, ops, types)
    k = len(results)
    for i, operand in enumerate(ops):
        if operand.is_array:
            launch.array(k, operand.value)
            launch.add(*([np.int32(1 if operand.mode == "c" else 0)] if flat
                         else per_array[k]))
            k += 1
        else:
            launch.add(scalar_types[i].scalar(operand.value))
    for j, step in enumerate(steps):
        launch.add(*[compute[j].scalar(p) for p in step.params])
    return launch


def _family_op(steps, ops, types, results):
    """The op when this call can use a shared family kernel (one op over operands in order,
    all converted to one compute type), else None."""
    if len(steps) != 1 or len(results) != 1:
        return None
    if any(ctype(t).loader for t in [*types, *(o.dtype for o in ops if o.is_array),
                                     results[0].dtype]):
        return None  # storage formats (bfloat16, float8...): the generated kernel loads them
    step = steps[0]
    op = step.op
    if step.args != tuple(("in", k) for k in range(len(ops))):
        return None
    if TABLE.get(op.name) is not op:
        return None
    if op.name == "Cast":  # a same-type copy (or a fill) is the family's Identity
        source = ops[0].dtype if ops[0].is_array else None
        return "Identity" if source in (None, results[0].dtype) else None
    if op.result not in ("promote", "bool", "first"):
        return None
    return op.name


def _kernel(runtime, signature, steps, ops, types, out_dtypes, flat):
    memo = runtime.memo("ew_kernels")
    kernels = memo.get(signature)
    if kernels is None:
        source = elementwise_source(steps, ops, types, out_dtypes, runtime.per_item)
        kernels = memo[signature] = (runtime.kernel(source, "ew_flat"),
                                     runtime.kernel(source, "ew_strided"))
    return kernels[0] if flat else kernels[1]


def run_expression(op: EwOp, operands: Sequence[Any], out: CLArray | None = None,
                   params: Sequence[float] = (), dtype: Any = None) -> CLArray:
    """One op (typically a kernel's own multi-operand expression) over ``operands``."""
    step = Step(op, tuple(("in", k) for k in range(len(operands))), tuple(params))
    return run_elementwise([step], operands, [out], [dtype])[0]


# -- table ops by name, copies and assignment ---------------------------------------------------


def device_operand(value: Any, runtime: Any) -> Any:
    """``value`` as an operand on ``runtime``: CLArrays and host scalars pass through; host
    arrays (and lists) are uploaded."""
    if isinstance(value, CLArray):
        return value
    if isinstance(value, np.ndarray) and value.ndim:
        return from_numpy(runtime, value)
    if isinstance(value, (list, tuple)):
        return from_numpy(runtime, np.asarray(value))
    if isinstance(value, np.ndarray):
        return value[()]
    return value


def _runtime(*values: Any) -> Any:
    for value in values:
        if isinstance(value, CLArray):
            return value.runtime
    raise BackendError("an OpenCL array function needs at least one device array")


def apply(op_name: str, *operands: Any, out: CLArray | None = None, dtype: Any = None,
          params: Sequence[float] = ()) -> CLArray:
    """Run table op ``op_name`` elementwise (broadcasting) into ``out`` (or a new array)."""
    runtime = _runtime(out, *operands)
    values = [device_operand(v, runtime) for v in operands]
    op = TABLE[op_name]
    step = Step(op, tuple(("in", k) for k in range(len(values))), tuple(params))
    given = [out.dtype if out is not None else dtype]
    if dtype is not None and out is None and op.result != "given":
        result = run_elementwise([step], values, [None], runtime=runtime)[0]
        return result if result.dtype == np.dtype(dtype) else astype(result, dtype)
    return run_elementwise([step], values, [out], given, runtime=runtime)[0]


def assign(target: CLArray, value: Any) -> None:
    """``target[...] = value``: broadcast, converted to the target's dtype."""
    if isinstance(value, np.ndarray) and value.ndim:
        upload_into(target, value)
        return
    if isinstance(value, CLArray) and value.runtime is not target.runtime:
        value = from_numpy(target.runtime, to_numpy(value))
    if target.size == 0:
        return
    bits = storage_view_dtype(target.dtype)
    if bits != target.dtype:  # a storage format (bfloat16, float8...)
        if not isinstance(value, CLArray):  # a fill: converted on the host, as NumPy does
            value = np.asarray(value).astype(target.dtype).view(bits)[()]
        elif value.dtype == target.dtype:  # a copy keeps the bits (NaN payloads too)
            value = _reinterpret(value, bits)
        else:
            apply("Cast", value, out=target)
            return
        assign(_reinterpret(target, bits), value)
        return
    if isinstance(value, CLArray) and value.buffer is target.buffer and value.dtype == \
            target.dtype and (value.offset, value.strides, value.shape) == \
            (target.offset, target.strides, target.shape):
        return  # the array itself (an op computed in place)
    if isinstance(value, CLArray) and _plain_copy(target, value):
        import pyopencl as cl

        target.runtime.touch(target)
        with target.runtime.lock:
            event = cl.enqueue_copy(target.runtime.queue, target.buffer, value.buffer,
                                    byte_count=value.nbytes,
                                    src_offset=value.offset * value.itemsize,
                                    dst_offset=target.offset * target.itemsize)
        target.runtime.record(event)
        return
    apply("Cast", value, out=target)


def _reinterpret(x: CLArray, dtype: np.dtype) -> CLArray:
    """``x``'s elements seen as ``dtype`` of the same width (a view)."""
    return CLArray(x.runtime, x.buffer, x.shape, dtype, x.strides, x.offset)


def _plain_copy(target: CLArray, value: CLArray) -> bool:
    if not (value.dtype == target.dtype and value.shape == target.shape
            and value.is_contiguous and target.is_contiguous):
        return False
    if value.buffer is not target.buffer:
        return True
    start, stop = value.offset, value.offset + value.size
    return stop <= target.offset or target.offset + target.size <= start


def copy(x: CLArray) -> CLArray:
    """A contiguous copy of ``x`` (``CLArray.copy``)."""
    out = empty(x.runtime, x.shape, x.dtype)
    assign(out, x)
    return out


def astype(x: CLArray, dtype: Any, copy: bool = True) -> CLArray:
    """``x`` converted to ``dtype`` (``CLArray.astype``): ``x`` itself when the dtype matches
    and ``copy`` is false, else a new contiguous array."""
    dtype = np.dtype(dtype)
    if dtype == x.dtype and not copy:
        return x
    out = empty(x.runtime, x.shape, dtype)
    assign(out, x)
    return out


def upload_into(target: CLArray, host: Any) -> None:
    """Copy host data (broadcast and converted to the target's dtype) into ``target``."""
    host = np.asarray(host)
    if host.shape == target.shape and target.is_contiguous:
        upload(target, np.require(host, dtype=target.dtype, requirements="C"))
        return
    assign(target, from_numpy(target.runtime, host.astype(target.dtype, copy=False)))
