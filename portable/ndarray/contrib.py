"""``nd.contrib``: MXNet 1.x's imperative control flow (``foreach``, ``while_loop``, ``cond``)
and a few cheap contrib functions (``isinf``, ``isfinite``, ``isnan``, ``arange_like``,
``BilinearResize2D``).

The control flow runs the Python body on NDArrays, step by step, so autograd records every op
of every step and differentiates through the loop, as MXNet's imperative versions do. Outputs
are stacked along a new first axis; ``while_loop`` pads them to ``max_iterations`` rows
(MXNet leaves the padding uninitialised; here it is zeros).

Example:
    >>> import portable as mx
    >>> outs, state = mx.nd.contrib.foreach(lambda x, s: (x + s, x + s),
    ...                                     mx.nd.array([1, 2, 3]), mx.nd.array([0]))
    >>> outs.asnumpy().ravel().tolist(), state.asnumpy().tolist()
    ([1.0, 3.0, 6.0], [6.0])
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from portable.errors import OpError, PortableError
from portable.nested import flatten, regroup
from portable.ndarray.invoke import invoke
from portable.ndarray.mxnet_functions import stack
from portable.ndarray.ndarray import NDArray, array, zeros


def _flatten(args: Any, what: str) -> tuple[list[NDArray], Any]:
    """Nested lists of NDArrays -> (flat list, format); format 0 means a bare NDArray."""
    return flatten(args, NDArray, what)


def _as_bool(value: Any, what: str) -> bool:
    if hasattr(value, "asnumpy"):
        host = value.asnumpy()
        if host.size != 1:
            raise PortableError(f"{what} must be one value, got shape {host.shape}")
        value = host.reshape(-1)[0]
    return bool(value)


def foreach(body: Callable[[Any, Any], tuple[Any, Any]], data: Any,
            init_states: Any) -> tuple[Any, Any]:
    """Run ``body(data[i], states) -> (outputs, states)`` over the first axis of ``data`` (an
    NDArray or a list of them); returns the outputs stacked along a new first axis (in the
    structure ``body`` returns) and the final states.

    Example:
        >>> import portable as mx
        >>> foreach(lambda x, s: (x * 2, s), mx.nd.ones((3, 2)), [])[0].shape
        (3, 2)
    """
    _flatten(data, "foreach data"), _flatten(init_states, "foreach init_states")
    single = isinstance(data, NDArray)
    steps = data.shape[0] if single else data[0].shape[0]
    states, outputs, fmt = init_states, [], None
    for i in range(steps):
        items = data[i] if single else [d[i] for d in data]
        outs, states = body(items, states)
        flat, fmt = _flatten(outs, "foreach output")
        outputs.append(flat)
    if fmt is None:
        return [], states
    stacked = [stack(*column) for column in zip(*outputs)]
    return regroup(stacked, fmt)[0], states


def while_loop(cond: Callable[..., Any], func: Callable[..., tuple[Any, Any]], loop_vars: Any,
               max_iterations: int | None = None) -> tuple[Any, Any]:
    """While ``cond(*loop_vars)`` and fewer than ``max_iterations`` steps: ``step_output,
    loop_vars = func(*loop_vars)``. Returns the step outputs stacked along a new first axis and
    padded (with zeros) to ``max_iterations`` rows, and the final loop variables.

    Example:
        >>> import portable as mx
        >>> out, (i, s) = while_loop(lambda i, s: i < 3, lambda i, s: (s, (i + 1, s + i)),
        ...                          (mx.nd.array([0]), mx.nd.array([0])), max_iterations=5)
        >>> out.shape, s.asnumpy().tolist()
        ((5, 1), [3.0])
    """
    if max_iterations is None:
        raise PortableError("while_loop: max_iterations must be given")
    max_iterations = int(max_iterations.asscalar() if hasattr(max_iterations, "asscalar")
                         else max_iterations)
    single = isinstance(loop_vars, NDArray)
    loop_vars = [loop_vars] if single else list(loop_vars)
    if not loop_vars:
        raise PortableError("while_loop: loop_vars must hold at least one NDArray")
    outputs, fmt, steps = [], None, 0
    while steps < max_iterations and _as_bool(cond(*loop_vars), "while_loop: cond's result"):
        step_output, new_vars = func(*loop_vars)
        step_output = [] if step_output is None else step_output
        new_vars = [] if new_vars is None else new_vars
        new_vars = [new_vars] if isinstance(new_vars, NDArray) else list(new_vars)
        if len(new_vars) != len(loop_vars):
            raise PortableError(f"while_loop: func returned {len(new_vars)} loop variables, "
                                f"expected {len(loop_vars)}")
        flat, fmt = _flatten(list(step_output) if isinstance(step_output, tuple)
                             else step_output, "while_loop step output")
        if outputs and len(flat) != len(outputs[0]):
            raise PortableError(f"while_loop: step {steps} gave {len(flat)} outputs, the first "
                                f"step {len(outputs[0])}")
        outputs.append(flat)
        loop_vars, steps = new_vars, steps + 1
    stacked = []
    for column in zip(*outputs):
        items = [x.expand_dims(0) for x in column]
        if steps < max_iterations:
            first = column[0]
            items.append(zeros((max_iterations - steps,) + first.shape, first.device,
                               first.dtype))
        stacked.append(invoke("Concat", items, {"axis": 0}))
    result = regroup(stacked, fmt)[0] if fmt is not None else []
    return result, loop_vars[0] if single else loop_vars


def cond(pred: Any, then_func: Callable[[], Any], else_func: Callable[[], Any]) -> Any:
    """``then_func()`` if ``pred`` (an NDArray of one value, or a Python value) is true, else
    ``else_func()``."""
    return then_func() if _as_bool(pred, "cond: pred") else else_func()


def _test(data: NDArray, keep: Callable[[np.ndarray], np.ndarray]) -> NDArray:
    """An elementwise test giving 0/1 in ``data``'s dtype (MXNet's convention)."""
    from portable.dtypes import to_onnx

    return invoke("Cast", [keep(data)], {"to": to_onnx(data.dtype)})


def isinf(data: NDArray) -> NDArray:
    """1 where ``data`` is +-inf, else 0 (in ``data``'s dtype)."""
    return _test(data, lambda x: invoke("IsInf", [x]))


def isnan(data: NDArray) -> NDArray:
    """1 where ``data`` is NaN, else 0."""
    return _test(data, lambda x: invoke("IsNaN", [x]))


def isfinite(data: NDArray) -> NDArray:
    """1 where ``data`` is neither inf nor NaN, else 0."""
    return _test(data, lambda x: invoke("Not", [invoke("Or", [invoke("IsInf", [x]),
                                                               invoke("IsNaN", [x])])]))


def arange_like(data: NDArray, start: float = 0.0, step: float = 1.0, repeat: int = 1,
                axis: int | None = None) -> NDArray:
    """``start, start + step, ...`` shaped like ``data`` (or like its ``axis``), each value
    ``repeat`` times, in ``data``'s dtype."""
    shape = data.shape if axis is None else (data.shape[axis],)
    count = int(np.prod(shape, dtype=np.int64))
    values = start + step * (np.arange(count) // int(repeat))
    return array(values.reshape(shape).astype(data.dtype), device=data.device, dtype=data.dtype)


def BilinearResize2D(data: NDArray, height: int | None = None,  # noqa: N802 - MXNet's name
                     width: int | None = None, scale_height: float | None = None,
                     scale_width: float | None = None, align_corners: bool = True,
                     mode: str = "size", **_: Any) -> NDArray:
    """Bilinear resize of NCHW ``data`` to (height, width) or by the scales
    (``align_corners=True`` by default, as MXNet's)."""
    if mode != "size":
        raise OpError(f"BilinearResize2D: mode {mode!r} is not supported (only 'size')")
    n, c, h, w = data.shape
    out_h = int(height) if height else int(h * scale_height)
    out_w = int(width) if width else int(w * scale_width)
    sizes = array(np.asarray([n, c, out_h, out_w], np.int64), device=data.device,
                  dtype=np.int64)
    transform = "align_corners" if align_corners else "half_pixel"
    return invoke("Resize", [data, None, None, sizes],
                  {"mode": "linear", "coordinate_transformation_mode": transform})
