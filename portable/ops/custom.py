"""Custom ops written in Python (MXNet 1.x ``mx.operator.CustomOp``): the private ops ``Custom``
and ``CustomGrad``, whose every facet defers to the registered ``CustomOpProp``.

A node names its prop by two attributes: ``op_type`` (the name given to
``mx.operator.register``) and ``kwargs``, the prop's constructor arguments as ``"key=value"``
strings (MXNet hands them to the prop as strings too). Its inputs are the prop's arguments then
its auxiliary states; its outputs the prop's outputs.

- Types: the prop's ``infer_shape`` and ``infer_type`` (counts checked, op_type named).
- Kernel: the user's ``forward`` / ``backward``, run on NDArrays wrapping the kernel's buffers.
  The code that wraps them lives with the user API (``portable.operator``), which installs it
  here with :func:`install_runtime`; backends reach it through :func:`run`.
- Gradient: ``CustomGrad`` (out_grads, in_data, out_data, aux -> in_grads), whose kernel calls
  ``backward``; out_grads the prop's ``declare_backward_dependency`` leaves out are absent.
- ``is_train`` (an attribute) follows autograd's training mode through the ``training_mode``
  facet, as MXNet passes ``is_train`` to ``forward``.
- Export: refused, naming the op_type (the op's code is Python).
"""
from __future__ import annotations

import difflib
from typing import Any, Callable, Sequence

import numpy as np

from portable.errors import OpError, ShapeError, UnknownOpError
from portable.ir.graph import Node, TensorType
from portable.ops.registry import Attr, DtypeContext, InferContext, declare

_ATTRS = {"op_type": Attr("string"), "kwargs": Attr("strings", ()), "is_train": Attr("int", 0)}
_PROP_CACHE_LIMIT = 1024

prop_classes: dict[str, type] = {}       # op_type -> CustomOpProp subclass
_props: dict[tuple, Any] = {}            # (class, kwargs) -> prop instance
_runtime: dict[str, Callable] = {}       # "forward" / "backward" -> runner (portable.operator)


# -- the registry of props ----------------------------------------------------------------------


def register_prop(op_type: str, prop_class: type) -> None:
    """Make ``op_type`` name ``prop_class`` (registering a name again replaces it, as MXNet)."""
    if not isinstance(op_type, str) or not op_type:
        raise OpError(f"custom op names must be non-empty strings, got {op_type!r}")
    prop_classes[op_type] = prop_class


def kwargs_attr(kwargs: dict[str, Any]) -> tuple[str, ...]:
    """The ``kwargs`` attribute: ``"key=value"`` with values as ``str()`` makes them (MXNet)."""
    return tuple(f"{key}={value}" for key, value in sorted(kwargs.items()))


def parse_kwargs(op_type: str, items: Sequence[str]) -> dict[str, str]:
    """The prop's constructor arguments back from a ``kwargs`` attribute."""
    result = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or not key:
            raise OpError(f"custom op {op_type!r}: kwargs entry {item!r} is not 'key=value'")
        result[key] = value
    return result


def prop_for(op_type: str, kwargs: Sequence[str] = ()) -> Any:
    """The prop instance of ``op_type`` built with ``kwargs`` (cached: props are pure).

    Raises:
        UnknownOpError: no prop is registered under ``op_type``.
        OpError: the prop's constructor refused the arguments.
    """
    cls = prop_classes.get(op_type)
    if cls is None:
        close = difflib.get_close_matches(str(op_type), list(prop_classes), n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UnknownOpError(
            f"custom op {op_type!r} is not registered (registered: "
            f"{sorted(prop_classes) or 'none'}){hint}; decorate its CustomOpProp with "
            f"@mx.operator.register({op_type!r})")
    key = (cls, tuple(kwargs))
    prop = _props.get(key)
    if prop is None:
        try:
            prop = cls(**parse_kwargs(op_type, kwargs))
        except TypeError as exc:
            raise OpError(f"custom op {op_type!r}: {cls.__name__}({', '.join(kwargs)}) "
                          f"failed: {exc}") from exc
        if len(_props) >= _PROP_CACHE_LIMIT:
            _props.clear()
        _props[key] = prop
    return prop


def signature(op_type: str, prop: Any) -> tuple[list[str], list[str], list[str]]:
    """``(arguments, outputs, auxiliary states)`` names the prop lists, checked to be lists."""
    lists = []
    for method in ("list_arguments", "list_outputs", "list_auxiliary_states"):
        names = getattr(prop, method)()
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise OpError(f"custom op {op_type!r}: {method}() must return a list of names, "
                          f"got {names!r:.80}")
        lists.append(list(names))
    if not lists[1]:
        raise OpError(f"custom op {op_type!r}: list_outputs() is empty")
    return lists[0], lists[1], lists[2]


# -- type rules ---------------------------------------------------------------------------------


def _split(op_type: str, method: str, result: Any) -> tuple[list, list, list]:
    """``infer_shape`` / ``infer_type`` return 2 or 3 lists (inputs, outputs[, aux])."""
    if not isinstance(result, (list, tuple)) or len(result) not in (2, 3):
        raise ShapeError(f"custom op {op_type!r}: {method}() must return 2 or 3 lists "
                         f"(inputs, outputs[, aux]), got {result!r:.80}")
    ins, outs = list(result[0]), list(result[1])
    aux = list(result[2]) if len(result) == 3 else []
    return ins, outs, aux


def _check_counts(op_type: str, method: str, got: Sequence[list],
                  names: Sequence[list[str]]) -> None:
    for what, values, expected in zip(("input", "output", "auxiliary state"), got, names):
        if len(values) != len(expected):
            raise ShapeError(f"custom op {op_type!r}: {method}() returned {len(values)} {what} "
                             f"entries, the prop lists {len(expected)} ({expected})")


def _call(op_type: str, method: str, fn: Callable, argument: list) -> Any:
    """Call a prop method; a user error becomes a ShapeError naming the op_type."""
    try:
        return fn(argument)
    except (OpError, ShapeError):
        raise
    except Exception as exc:
        raise ShapeError(f"custom op {op_type!r}: {method}({argument}) raised "
                         f"{type(exc).__name__}: {exc}") from exc


def infer_custom(op_type: str, kwargs: Sequence[str], shapes: Sequence[Sequence[int]],
                 dtypes: Sequence[Any]) -> tuple[list[TensorType], list[TensorType],
                                                  list[TensorType]]:
    """Argument, output and auxiliary types from the arguments' shapes and dtypes.

    Args:
        op_type: the registered name.
        kwargs: the ``kwargs`` attribute.
        shapes: one shape per argument (``[]`` where unknown, as MXNet passes it).
        dtypes: one dtype per argument.

    Returns:
        ``(arguments, outputs, aux)`` as TensorTypes.
    """
    prop = prop_for(op_type, kwargs)
    names = signature(op_type, prop)
    shaped = _split(op_type, "infer_shape",
                    _call(op_type, "infer_shape", prop.infer_shape, [list(s) for s in shapes]))
    _check_counts(op_type, "infer_shape", shaped, names)
    typed = _split(op_type, "infer_type",
                   _call(op_type, "infer_type", prop.infer_type, [np.dtype(d) for d in dtypes]))
    _check_counts(op_type, "infer_type", typed, names)
    result = []
    for group_shapes, group_types in zip(shaped, typed):
        try:
            result.append([TensorType(tuple(int(d) for d in s), np.dtype(t))
                           for s, t in zip(group_shapes, group_types)])
        except TypeError as exc:
            raise ShapeError(f"custom op {op_type!r}: infer_shape/infer_type gave "
                             f"{group_shapes} / {group_types}, not shapes and dtypes: "
                             f"{exc}") from exc
    return result[0], result[1], result[2]


def _node_signature(ctx: InferContext) -> tuple[str, tuple, Any, list, list, list]:
    op_type, kwargs = ctx.attrs["op_type"], tuple(ctx.attrs["kwargs"])
    prop = prop_for(op_type, kwargs)
    args, outs, aux = signature(op_type, prop)
    return op_type, kwargs, prop, args, outs, aux


def _custom_infer(ctx: InferContext) -> list[TensorType]:
    op_type, kwargs, prop, args, outs, aux = _node_signature(ctx)
    if len(ctx) != len(args) + len(aux):
        ctx.fail(f"custom op {op_type!r} takes {len(args) + len(aux)} inputs "
                 f"(arguments {args}, auxiliary states {aux}), got {len(ctx)}")
    stypes = _call(op_type, "infer_storage_type", prop.infer_storage_type,
                   ["default"] * len(args))
    if any(s != "default" for group in stypes for s in group):
        ctx.fail(f"custom op {op_type!r}: sparse storage types {stypes} are not supported")
    in_types, out_types, aux_types = infer_custom(
        op_type, kwargs, [ctx.shape(i) for i in range(len(args))],
        [ctx.dtype(i) for i in range(len(args))])
    given = [ctx.type(i) for i in range(len(ctx))]
    for name, want, got in zip(args + aux, in_types + aux_types, given):
        if want != got:
            ctx.fail(f"custom op {op_type!r}: infer_shape/infer_type expect {name!r} to be "
                     f"{want!r}, it is {got!r}")
    return out_types


def _custom_dtype(ctx: DtypeContext) -> list[np.dtype | None]:
    """The prop's ``infer_type`` on the dtypes known so far (None where not yet, as MXNet passes
    them); its argument and auxiliary dtypes fill the inputs not known yet."""
    op_type, kwargs = ctx.attrs["op_type"], tuple(ctx.attrs["kwargs"])
    prop = prop_for(op_type, kwargs)
    names = signature(op_type, prop)
    args, outs, aux = names
    if len(ctx.inputs) != len(args) + len(aux):
        ctx.fail(f"custom op {op_type!r} takes {len(args) + len(aux)} inputs "
                 f"(arguments {args}, auxiliary states {aux}), got {len(ctx.inputs)}")
    if all(ctx.inputs[i] is None for i in range(len(args))):
        return [None] * len(outs)  # nothing to call infer_type with yet
    typed = _split(op_type, "infer_type",
                   _call(op_type, "infer_type", prop.infer_type, ctx.inputs[:len(args)]))
    _check_counts(op_type, "infer_type", typed, names)
    for index, dtype in enumerate(list(typed[0]) + list(typed[2])):
        if ctx.inputs[index] is None and dtype is not None:
            ctx.inputs[index] = np.dtype(dtype)
    return [None if t is None else np.dtype(t) for t in typed[1]]


def _custom_grad_dtype(ctx: DtypeContext) -> list[np.dtype | None]:
    """Each input gradient has its input's dtype (in_data follow the out_grads)."""
    op_type, kwargs = ctx.attrs["op_type"], tuple(ctx.attrs["kwargs"])
    args, outs, _ = signature(op_type, prop_for(op_type, kwargs))
    return [ctx.dtype(len(outs) + i) if len(outs) + i < len(ctx.inputs) else None
            for i in range(len(args))]


def backward_inputs(op_type: str, prop: Any, n_in: int, n_out: int) -> set[int]:
    """Which out_grads ``backward`` needs (indices into the outputs), per
    ``declare_backward_dependency`` over MXNet's ids: out_grad, in_data, out_data in order."""
    out_grad = list(range(n_out))
    in_data = list(range(n_out, n_out + n_in))
    out_data = list(range(n_out + n_in, 2 * n_out + n_in))
    deps = prop.declare_backward_dependency(out_grad, in_data, out_data)
    try:
        return {int(d) for d in deps if int(d) < n_out}
    except (TypeError, ValueError) as exc:
        raise OpError(f"custom op {op_type!r}: declare_backward_dependency() must return "
                      f"ids, got {deps!r:.80}") from exc


def _custom_grad(g, dys):
    op_type, kwargs = g.attrs["op_type"], tuple(g.attrs["kwargs"])
    prop = prop_for(op_type, kwargs)
    args, outs, aux = signature(op_type, prop)
    needed = backward_inputs(op_type, prop, len(args), len(outs))
    out_grads = []
    for i in range(len(outs)):
        dy = dys[i] if i < len(dys) else None
        if i not in needed:
            out_grads.append(None)
        else:
            out_grads.append(dy if dy is not None else g.zeros_like(g.outputs[i]))
    grads = g.emit("portable.CustomGrad", *out_grads, *g.inputs[:len(args)], *g.outputs,
                   *g.inputs[len(args):], num_outputs=len(args), op_type=op_type,
                   kwargs=kwargs, is_train=1)
    grads = list(grads) if len(args) > 1 else [grads]
    return grads + [None] * len(aux)


def _custom_grad_infer(ctx: InferContext) -> list[TensorType]:
    op_type, kwargs, _, args, outs, aux = _node_signature(ctx)
    expected = 2 * len(outs) + len(args) + len(aux)
    if len(ctx) != expected:
        ctx.fail(f"custom op {op_type!r}: its gradient takes {expected} inputs (out_grads, "
                 f"in_data {args}, out_data {outs}, aux {aux}), got {len(ctx)}")
    return [ctx.type(len(outs) + i) for i in range(len(args))]


def _training_mode(node: Node, training: bool) -> Node:
    return node.replace(attrs={**node.attrs, "is_train": int(training)})


def _refuse_export(g) -> list:
    raise UnknownOpError(
        f"node {g.node.name!r}: custom op {g.attrs['op_type']!r} (mx.operator.CustomOp) runs "
        f"Python code and has no ONNX form; replace it with built-in ops to export the model")


declare("Custom", domain="portable", inputs=("inputs*",), outputs=("outputs*",),
        infer=_custom_infer, attrs=_ATTRS, grad=_custom_grad, training_mode=_training_mode,
        decompose=_refuse_export, dtype_rule=_custom_dtype,
        doc="A Python op registered with mx.operator.register (MXNet's Custom).")
declare(
    "CustomGrad", domain="portable", inputs=("tensors*",), outputs=("in_grads*",),
    infer=_custom_grad_infer, attrs=_ATTRS, decompose=_refuse_export,
    dtype_rule=_custom_grad_dtype,
    doc="The gradient of Custom: the registered op's backward, from out_grads, in_data, "
        "out_data and aux.")


# -- running the user's code ------------------------------------------------------------------


def install_runtime(forward: Callable, backward: Callable) -> None:
    """Called by ``portable.operator``: the functions that run a prop's op on wrapped buffers,
    ``fn(attrs, inputs, outputs, device)``."""
    _runtime["forward"], _runtime["backward"] = forward, backward


def run(kind: str, attrs: dict, inputs: list, outputs: list, device: Any) -> None:
    """Run the op's ``forward`` or ``backward`` (``kind``) on host buffers: a kernel's body.

    Raises:
        OpError: nothing registered a runtime (no prop can be registered without one).
    """
    runner = _runtime.get(kind)
    if runner is None:
        raise OpError(f"custom op {attrs.get('op_type')!r}: mx.operator was never imported, "
                      f"so no CustomOp can run")
    runner(attrs, inputs, outputs, device)
