"""Operators written in Python (MXNet 1.x ``mx.operator``): ``CustomOp``, ``CustomOpProp``,
``register``, and ``Custom`` for NDArrays (``mx.nd.Custom``) and Symbols (``mx.sym.Custom``).

A registered prop becomes the private op ``portable.Custom`` (``portable/ops/custom.py``), so
imperative calls, autograd, bound symbols and hybridized blocks all run it through the op
table, the engine and the CPU kernel table like any other op. The kernel calls the op's
``forward`` / ``backward`` with NDArrays wrapping its buffers; the ops the user's code applies to
them run at once in the kernel's thread (a per-thread engine), so ``asnumpy()`` inside
``forward`` works as in MXNet. The operator object that ``create_operator`` returns is made once
per op_type, arguments, device, input shapes and dtypes, and shared by ``forward`` and
``backward`` (state kept on ``self`` between them works, as in a bound MXNet executor).

Example:
    >>> import portable as mx
    >>> class Sqr(mx.operator.CustomOp):
    ...     def forward(self, is_train, req, in_data, out_data, aux):
    ...         self.assign(out_data[0], req[0], in_data[0] * in_data[0])
    >>> @mx.operator.register("sqr_doc")
    ... class SqrProp(mx.operator.CustomOpProp):
    ...     def create_operator(self, ctx, shapes, dtypes):
    ...         return Sqr()
    >>> mx.nd.Custom(mx.nd.array([1, 2, 3]), op_type="sqr_doc").asnumpy().tolist()
    [1.0, 4.0, 9.0]
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from portable import tape
from portable.engine import NaiveEngine, thread_engine
from portable.errors import BackendError, OpError, PortableError
from portable.ndarray.invoke import invoke
from portable.ndarray.ndarray import NDArray
from portable.ops import custom as custom_ops
from portable.symbol import shape_hints
from portable.symbol.symbol import SymNode, Symbol, apply_op, auto_name

__all__ = ["Custom", "CustomOp", "CustomOpProp", "custom_symbol", "get_all_registered_operators",
           "register"]

_REQS = ("null", "write", "inplace", "add")
# MXNet's dtype ids, which create_operator receives (mshadow's type flags)
_MX_DTYPE_IDS = {"float32": 0, "float64": 1, "float16": 2, "uint8": 3, "int32": 4, "int8": 5,
                 "int64": 6, "bool": 7}
_OPERATOR_CACHE_LIMIT = 256


class CustomOp:
    """Base class of an op's computation; override ``forward`` and ``backward``."""

    def __init__(self) -> None:
        pass

    def forward(self, is_train: bool, req: list[str], in_data: list[NDArray],
                out_data: list[NDArray], aux: list[NDArray]) -> None:
        """Write the outputs: ``self.assign(out_data[i], req[i], value)`` for each.

        Args:
            is_train: whether autograd records in training mode (or ``forward(is_train=True)``).
            req: how to write each output: ``null``, ``write``, ``inplace`` or ``add``.
            in_data: the arguments, in ``list_arguments`` order.
            out_data: the outputs to write, in ``list_outputs`` order.
            aux: the auxiliary states (may be updated in place).
        """

    def backward(self, req: list[str], out_grad: list[NDArray], in_data: list[NDArray],
                 out_data: list[NDArray], in_grad: list[NDArray], aux: list[NDArray]) -> None:
        """Write the inputs' gradients: ``self.assign(in_grad[i], req[i], value)``."""

    def assign(self, dst: NDArray, req: str, src: Any) -> None:
        """Write ``src`` into ``dst`` as ``req`` says (``null`` does nothing, ``add`` adds).

        Example:
            >>> op.assign(out_data[0], req[0], in_data[0] * 2)  # doctest: +SKIP
        """
        if req == "null":
            return
        if req in ("write", "inplace"):
            dst[:] = src
        elif req == "add":
            dst[:] += src
        else:
            raise OpError(f"CustomOp.assign: req {req!r} is not one of {_REQS}")


class CustomOpProp:
    """Base class of an op's properties: names, shapes, dtypes and its operator factory.

    Args:
        need_top_grad: whether ``backward`` reads the outputs' gradients (False for a loss,
            whose backward makes its own gradient from the outputs and a label).
    """

    def __init__(self, need_top_grad: bool = True) -> None:
        self.need_top_grad_ = need_top_grad

    def infer_shape(self, in_shape: list[list[int]]) -> tuple:
        """``(argument shapes, output shapes[, aux shapes])``; every output like argument 0."""
        return in_shape, (in_shape[0],) * len(self.list_outputs()), ()

    def infer_type(self, in_type: list[np.dtype]) -> tuple:
        """``(argument dtypes, output dtypes[, aux dtypes])``; all like argument 0."""
        return (in_type, [in_type[0]] * len(self.list_outputs()),
                [in_type[0]] * len(self.list_auxiliary_states()))

    def infer_storage_type(self, in_stype: list[str]) -> tuple:
        """Storage types: only ``default`` (dense) exists here."""
        for index, stype in enumerate(in_stype):
            if stype != "default":
                raise OpError(f"in_stype[{index}] is {stype!r}; only 'default' is supported")
        return (in_stype, ["default"] * len(self.list_outputs()),
                ["default"] * len(self.list_auxiliary_states()))

    def list_outputs(self) -> list[str]:
        return ["output"]

    def list_arguments(self) -> list[str]:
        return ["data"]

    def list_auxiliary_states(self) -> list[str]:
        return []

    def declare_backward_dependency(self, out_grad: list[int], in_data: list[int],
                                    out_data: list[int]) -> list[int]:
        """The ids ``backward`` reads; out_grad's only when ``need_top_grad``."""
        deps = list(out_grad) if self.need_top_grad_ else []
        return deps + list(in_data) + list(out_data)

    def create_operator(self, ctx: Any, in_shapes: list, in_dtypes: list) -> CustomOp:
        """The CustomOp that computes (``ctx`` the device; dtypes as MXNet's type ids)."""
        return CustomOp()


def register(reg_name: str) -> Callable[[type], type]:
    """Class decorator registering a CustomOpProp subclass as ``op_type=reg_name``.

    Example:
        >>> @register("my_op")  # doctest: +SKIP
        ... class MyProp(CustomOpProp): ...
    """
    def do_register(prop_cls: type) -> type:
        if not (isinstance(prop_cls, type) and issubclass(prop_cls, CustomOpProp)):
            raise OpError(f"register({reg_name!r}) decorates CustomOpProp subclasses, "
                          f"got {prop_cls!r}")
        custom_ops.register_prop(reg_name, prop_cls)
        return prop_cls
    return do_register


register("custom_op")(CustomOpProp)


def get_all_registered_operators() -> list[str]:
    """The op_types registered with :func:`register`."""
    return sorted(custom_ops.prop_classes)


# -- running the user's code inside a kernel -----------------------------------------------------


class _CallbackEngine(NaiveEngine):
    """The engine of the threads running an op's Python code: every op its NDArrays push runs
    at once in the pushing thread (raising there, so the user sees their traceback), and the
    vars each call writes are noted, to refuse a ``forward`` that leaves an output unwritten.
    One instance serves every thread, so arrays kept on ``self`` stay usable in later calls."""

    def __init__(self) -> None:
        super().__init__()
        self._calls = threading.local()

    def push(self, fn, reads=(), writes=(), device=None, priority=0, name="op") -> None:
        reads_t, _, writes_t = self._normalize(fn, reads, writes, name)
        self._refuse_deleted(reads_t, name)
        self._refuse_deleted(writes_t, name)
        written = getattr(self._calls, "written", None)
        if written is not None:
            written.update(id(v) for v in writes_t)
        fn()

    def track(self) -> set[int]:
        """Start noting this thread's writes; returns the set that fills."""
        self._calls.written = set()
        return self._calls.written


_engine = _CallbackEngine()
_operators: dict[tuple, CustomOp] = {}


def _operator(prop: CustomOpProp, op_type: str, kwargs: tuple, device: Any,
              in_data: Sequence[NDArray]) -> CustomOp:
    shapes = tuple(tuple(x.shape) for x in in_data)
    dtypes = tuple(x.dtype.name for x in in_data)
    key = (type(prop), op_type, kwargs, str(device), shapes, dtypes)
    op = _operators.get(key)
    if op is None:
        op = prop.create_operator(device, [list(s) for s in shapes],
                                  [_MX_DTYPE_IDS.get(d, -1) for d in dtypes])
        if not isinstance(op, CustomOp):
            raise OpError(f"custom op {op_type!r}: create_operator() must return a CustomOp, "
                          f"got {type(op).__name__}")
        if len(_operators) >= _OPERATOR_CACHE_LIMIT:
            _operators.pop(next(iter(_operators)))
        _operators[key] = op
    return op


def _user_call(op_type: str, method: str, fn: Callable[[], None]) -> None:
    try:
        fn()
    except PortableError as exc:
        raise OpError(f"custom op {op_type!r}: {method}() failed: {exc}") from exc
    except Exception as exc:
        raise OpError(f"custom op {op_type!r}: {method}() raised {type(exc).__name__}: "
                      f"{exc}") from exc


def _wrap(buffers: Sequence[Any], device: Any) -> list[NDArray]:
    return [NDArray(b, device) for b in buffers]


def _run_forward(attrs: dict, inputs: list, outputs: list, device: Any) -> None:
    op_type, kwargs = attrs["op_type"], tuple(attrs["kwargs"])
    prop = custom_ops.prop_for(op_type, kwargs)
    args, outs, _ = custom_ops.signature(op_type, prop)
    n_in = len(args)
    if any(o is None for o in outputs[:len(outs)]):  # outputs nobody reads still get buffers
        _, types, _ = custom_ops.infer_custom(op_type, kwargs, [x.shape for x in inputs[:n_in]],
                                              [x.dtype for x in inputs[:n_in]])
        outputs = [np.empty(t.shape, t.dtype) if o is None else o
                   for o, t in zip(outputs, types)]
    with thread_engine(_engine), tape.scope(False, bool(attrs["is_train"])):
        in_data, aux = _wrap(inputs[:n_in], device), _wrap(inputs[n_in:], device)
        out_data = _wrap(outputs[:len(outs)], device)
        op = _operator(prop, op_type, kwargs, device, in_data)
        written = _engine.track()
        _user_call(op_type, "forward", lambda: op.forward(
            is_train=bool(attrs["is_train"]), req=["write"] * len(outs), in_data=in_data,
            out_data=out_data, aux=aux))
    missing = [f"{i} ({name!r})" for i, (name, o) in enumerate(zip(outs, out_data))
               if id(o._var) not in written]
    if missing:
        raise OpError(f"custom op {op_type!r}: forward() did not write output(s) "
                      f"{', '.join(missing)}; write each with self.assign(out_data[i], req[i], "
                      f"value)")


def _run_backward(attrs: dict, inputs: list, outputs: list, device: Any) -> None:
    op_type, kwargs = attrs["op_type"], tuple(attrs["kwargs"])
    prop = custom_ops.prop_for(op_type, kwargs)
    args, outs, _ = custom_ops.signature(op_type, prop)
    n_in, n_out = len(args), len(outs)
    in_buffers = inputs[n_out:n_out + n_in]
    out_buffers = inputs[n_out + n_in:2 * n_out + n_in]
    # out_grads that declare_backward_dependency left out are absent: zeros stand in
    grad_buffers = [g if g is not None else np.zeros(o.shape, o.dtype)
                    for g, o in zip(inputs[:n_out], out_buffers)]
    for grad in outputs:  # a gradient backward leaves unwritten (a label's) reads as zero
        if grad is not None:
            grad[...] = 0
    in_grad_buffers = [np.zeros(x.shape, x.dtype) if g is None else g
                       for g, x in zip(outputs, in_buffers)]
    with thread_engine(_engine), tape.scope(False, True):
        in_data, out_data = _wrap(in_buffers, device), _wrap(out_buffers, device)
        out_grad, aux = _wrap(grad_buffers, device), _wrap(inputs[2 * n_out + n_in:], device)
        in_grad = _wrap(in_grad_buffers, device)
        op = _operator(prop, op_type, kwargs, device, in_data)
        _engine.track()
        _user_call(op_type, "backward", lambda: op.backward(
            req=["write"] * n_in, out_grad=out_grad, in_data=in_data, out_data=out_data,
            in_grad=in_grad, aux=aux))


custom_ops.install_runtime(_run_forward, _run_backward)


# -- the front ends --------------------------------------------------------------------------------


def _split_kwargs(op_type: Any, kwargs: dict, tensor: type) -> tuple[dict, tuple[str, ...]]:
    """Inputs given by name (``tensor`` values) and the prop's arguments (as strings)."""
    if not isinstance(op_type, str) or not op_type:
        raise OpError(f"Custom needs op_type='<name given to mx.operator.register>', "
                      f"got {op_type!r}")
    named = {k: v for k, v in kwargs.items() if isinstance(v, tensor)}
    params = {k: v for k, v in kwargs.items() if not isinstance(v, tensor)}
    return named, custom_ops.kwargs_attr(params)


def _place(op_type: str, positional: list, named: dict, names: list[str]) -> list:
    """Inputs in the prop's order (arguments, then auxiliary states); None where missing."""
    if len(positional) > len(names):
        raise OpError(f"custom op {op_type!r} takes {len(names)} inputs ({names}), "
                      f"got {len(positional)} positional")
    unknown = sorted(set(named) - set(names))
    if unknown:
        raise OpError(f"custom op {op_type!r}: no input named {unknown}; its inputs are {names}")
    placed = list(positional) + [None] * (len(names) - len(positional))
    for index, name in enumerate(names):
        if name in named:
            if placed[index] is not None:
                raise OpError(f"custom op {op_type!r}: input {name!r} given twice")
            placed[index] = named[name]
    return placed


def Custom(*inputs: NDArray, op_type: str | None = None, name: str | None = None,  # noqa: N802
           out: Any = None, **kwargs: Any) -> Any:
    """Apply the custom op registered as ``op_type`` (MXNet's ``mx.nd.Custom``).

    Args:
        *inputs: the arguments then auxiliary states, in the prop's order (or by name below).
        op_type: the name given to :func:`register`.
        name: ignored (MXNet's imperative calls take it too).
        out: an NDArray (or a list, one per output) to write into.
        **kwargs: NDArrays named after the prop's arguments, and the prop's constructor
            arguments, which it receives as strings (``str(value)``), as in MXNet.

    Returns:
        One NDArray, or a list of them for a prop with several outputs.

    Example:
        >>> y = Custom(x, op_type="sqr")  # doctest: +SKIP
    """
    named, params = _split_kwargs(op_type, kwargs, NDArray)
    prop = custom_ops.prop_for(op_type, params)
    args, outs, aux = custom_ops.signature(op_type, prop)
    placed = _place(op_type, list(inputs), named, args + aux)
    missing = [n for n, x in zip(args + aux, placed) if x is None]
    if missing:
        raise OpError(f"custom op {op_type!r}: input(s) {missing} not given; it takes "
                      f"{args + aux}")
    for x in placed:
        if not isinstance(x, NDArray):
            raise OpError(f"custom op {op_type!r}: inputs must be NDArrays, got "
                          f"{type(x).__name__}")
        if x.device.device_type != "cpu":
            raise BackendError(f"custom op {op_type!r} runs Python code on host arrays; its "
                               f"input is on {x.device}: copy it with as_in_context(mx.cpu())")
    result = invoke("portable.Custom", placed, {"op_type": op_type, "kwargs": params},
                    num_outputs=len(outs), out=out)
    return list(result) if len(outs) > 1 else result


def _input_shape_hint(source_shape: tuple, params: dict) -> tuple[int, ...]:
    """Shape hint of an input the caller left out (``softmax_label``): the prop's infer_shape
    given the one known input, as MXNet infers unknown shapes."""
    op_type, kwargs = params["op_type"], tuple(params["kwargs"])
    prop = custom_ops.prop_for(op_type, kwargs)
    args, _, aux = custom_ops.signature(op_type, prop)
    shapes: list[list[int]] = [[] for _ in args]
    shapes[params["source"]] = list(source_shape)
    result = prop.infer_shape(shapes)
    index = params["index"]
    known = list(result[0]) + (list(result[2]) if len(result) == 3 else [])
    if index >= len(known) or not known[index]:
        raise OpError(f"custom op {op_type!r}: infer_shape() leaves the shape of input "
                      f"{(args + aux)[index]!r} unknown; give it to infer_shape/simple_bind")
    return tuple(int(d) for d in known[index])


shape_hints.RULES["custom_op_input"] = _input_shape_hint


def custom_symbol(*inputs: Symbol, op_type: str | None = None, name: str | None = None,
                  **kwargs: Any) -> Symbol:
    """``mx.sym.Custom``: a node of the custom op ``op_type``; inputs left out become
    variables ``<name>_<argument>`` (``softmax_label``), shaped by the prop's infer_shape.

    Example:
        >>> net = custom_symbol(data=fc, op_type="softmax", name="softmax")  # doctest: +SKIP
        >>> net.list_arguments()[-1]  # doctest: +SKIP
        'softmax_label'
    """
    named, params = _split_kwargs(op_type, kwargs, Symbol)
    prop = custom_ops.prop_for(op_type, params)
    args, outs, aux = custom_ops.signature(op_type, prop)
    placed = _place(op_type, list(inputs), named, args + aux)
    name = name or auto_name("custom")
    source = next((i for i, x in enumerate(placed) if x is not None), None)
    for index, value in enumerate(placed):
        if value is not None:
            continue
        hint = None
        if source is not None:
            hint = ("custom_op_input", placed[source]._entries[0],
                    {"op_type": op_type, "kwargs": list(params), "index": index,
                     "source": source})
        node = SymNode(None, f"{name}_{(args + aux)[index]}", shape_hint=hint)
        placed[index] = Symbol([(node, 0)])
    return apply_op("portable.Custom", placed, name=name, num_outputs=len(outs),
                    op_type=op_type, kwargs=params)
