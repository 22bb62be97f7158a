"""Testing helpers with MXNet 1.x's names (``mx.test_utils``): tolerant comparisons with
MXNet's per-dtype default tolerances, random shapes and arrays, and checks of a symbol's forward
and backward passes (against expected values, or the gradient against finite differences) on
portable's Symbol.bind executor.

Example:
    >>> import portable as mx
    >>> x = mx.sym.var("x")
    >>> check_symbolic_forward(x * 2, {"x": np.array([1.0, 2.0])}, [np.array([2.0, 4.0])])
    >>> check_numeric_gradient(mx.sym.tanh(x), {"x": np.array([0.3, -0.4])})
"""
from __future__ import annotations

import numbers
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from portable.context import Context, current_context
from portable.device import set_default_device

# MXNet's default tolerances per dtype (integers and bools compare exactly)
_RTOLS = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-5}
_ATOLS = {np.dtype(np.float16): 1e-1, np.dtype(np.float32): 1e-3, np.dtype(np.float64): 1e-20}
_NUMERIC_EPS = {np.dtype(np.float16): 1.0 / 2 ** 6, np.dtype(np.float32): 1.0 / 2 ** 9,
                np.dtype(np.float64): 1.0 / 2 ** 14}


def default_context() -> Context:
    """The context tests run on (the current one)."""
    return current_context()


def set_default_context(ctx: Any) -> None:
    """Make ``ctx`` the default context of this thread (outside any ``with`` block)."""
    set_default_device(ctx if isinstance(ctx, Context) else Context(ctx))


def default_dtype() -> type:
    return np.float32


def _host(value: Any) -> np.ndarray:
    if hasattr(value, "asnumpy"):
        return value.asnumpy()
    return np.asarray(value)


def get_tols(x: Any, y: Any, rtol: Any, atol: Any) -> tuple[float, float]:
    """The (rtol, atol) for comparing ``x`` and ``y``: the given numbers, else the larger of
    the two dtypes' defaults."""
    def pick(value, given, table):
        if isinstance(given, numbers.Number):
            return float(given)
        dtype = np.dtype(_host(value).dtype)
        return float((given or {}).get(dtype, table.get(dtype, 0.0)))
    return (max(pick(x, rtol, _RTOLS), pick(y, rtol, _RTOLS)),
            max(pick(x, atol, _ATOLS), pick(y, atol, _ATOLS)))


def same(a: Any, b: Any) -> bool:
    """True when the two arrays are equal element by element (and in shape)."""
    return bool(np.array_equal(_host(a), _host(b)))


def almost_equal(a: Any, b: Any, rtol: Any = None, atol: Any = None,
                 equal_nan: bool = False, use_broadcast: bool = True) -> bool:
    """``|a - b| <= atol + rtol * |b|`` everywhere (MXNet's default tolerances per dtype)."""
    rtol, atol = get_tols(a, b, rtol, atol)
    a, b = _host(a), _host(b)
    if not use_broadcast and a.shape != b.shape:
        return False
    return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def assert_almost_equal(a: Any, b: Any, rtol: Any = None, atol: Any = None,
                        names: tuple[str, str] = ("a", "b"), equal_nan: bool = False,
                        use_broadcast: bool = True, mismatches: tuple[int, int] = (10, 10)
                        ) -> None:
    """Raise AssertionError naming ``names``, the worst element and the tolerances when
    ``a`` and ``b`` differ by more than ``atol + rtol * |b|`` somewhere.

    Example:
        >>> assert_almost_equal(np.array([1.0]), np.array([1.00001]))
    """
    rtol, atol = get_tols(a, b, rtol, atol)
    a, b = _host(a), _host(b)
    if not use_broadcast and a.shape != b.shape:
        raise AssertionError(f"{names[0]} has shape {a.shape}, {names[1]} has {b.shape}")
    if np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan):
        return
    a64, b64 = np.broadcast_arrays(a.astype(np.float64), b.astype(np.float64))
    excess = np.abs(a64 - b64) - (atol + rtol * np.abs(b64))
    excess = np.where(np.isnan(excess), np.inf, excess)
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape) if excess.ndim else ()
    bad = np.argwhere(excess > 0)[: mismatches[0]]
    raise AssertionError(
        f"Items are not equal (rtol={rtol}, atol={atol}): {len(np.argwhere(excess > 0))} of "
        f"{excess.size} differ; worst at {tuple(int(i) for i in worst)}: "
        f"{names[0]}={a64[worst]!r}, {names[1]}={b64[worst]!r}; first positions "
        f"{[tuple(int(i) for i in p) for p in bad]}")


def assert_exception(f: Callable[..., Any], exception_type: type, *args: Any,
                     **kwargs: Any) -> None:
    """Assert that ``f(*args, **kwargs)`` raises ``exception_type``."""
    try:
        f(*args, **kwargs)
    except exception_type:
        return
    raise AssertionError(f"{getattr(f, '__name__', f)} did not raise "
                         f"{exception_type.__name__}")


def random_arrays(*shapes: Sequence[int]) -> Any:
    """Standard-normal float32 NumPy arrays of ``shapes`` (one array when one shape)."""
    arrays = [np.array(np.random.randn(), dtype=np.float32) if len(s) == 0
              else np.random.randn(*s).astype(np.float32) for s in shapes]
    return arrays[0] if len(arrays) == 1 else arrays


def rand_shape_2d(dim0: int = 10, dim1: int = 10, allow_zero_size: bool = False) -> tuple:
    low = 0 if allow_zero_size else 1
    return np.random.randint(low, dim0 + 1), np.random.randint(low, dim1 + 1)


def rand_shape_3d(dim0: int = 10, dim1: int = 10, dim2: int = 10,
                  allow_zero_size: bool = False) -> tuple:
    low = 0 if allow_zero_size else 1
    return (np.random.randint(low, dim0 + 1), np.random.randint(low, dim1 + 1),
            np.random.randint(low, dim2 + 1))


def rand_shape_nd(num_dim: int, dim: int = 10, allow_zero_size: bool = False) -> tuple:
    low = 0 if allow_zero_size else 1
    return tuple(np.random.randint(low, dim + 1, size=num_dim))


def rand_ndarray(shape: Sequence[int], stype: str = "default", density: float | None = None,
                 dtype: Any = None, ctx: Any = None, **_: Any) -> Any:
    """A dense NDArray of uniform [0, 1) values (only ``stype='default'``: portable has no
    sparse storage)."""
    from portable.errors import PortableError
    from portable.ndarray import array

    if stype != "default":
        raise PortableError(f"rand_ndarray: storage type {stype!r} is not supported (portable "
                            f"arrays are dense)")
    values = np.random.uniform(size=tuple(shape)).astype(dtype or np.float32)
    return array(values, ctx=ctx, dtype=values.dtype)


def _locations(sym: Any, location: Any, dtype: Any) -> dict[str, np.ndarray]:
    names = sym.list_arguments()
    if isinstance(location, Mapping):
        missing = set(names) - set(location)
        if missing:
            raise ValueError(f"location lacks the arguments {sorted(missing)} of the symbol")
        return {n: _host(location[n]).astype(dtype) for n in names}
    if len(location) != len(names):
        raise ValueError(f"location holds {len(location)} arrays for the symbol's "
                         f"{len(names)} arguments {names}")
    return {n: _host(v).astype(dtype) for n, v in zip(names, location)}


def _bind(sym: Any, values: dict, aux_states: Any, ctx: Any, grad_req: Any = "write") -> Any:
    from portable.ndarray import array

    ctx = ctx or default_context()
    args = {n: array(v, ctx=ctx, dtype=v.dtype) for n, v in values.items()}
    aux = None
    if aux_states is not None:
        names = sym.list_auxiliary_states()
        items = aux_states.items() if isinstance(aux_states, Mapping) else zip(names, aux_states)
        aux = {n: array(_host(v), ctx=ctx) for n, v in items}
    return sym.bind(ctx, args=args, grad_req=grad_req, aux_states=aux)


def _expected_list(sym: Any, expected: Any, names: list[str]) -> list:
    if isinstance(expected, Mapping):
        return [expected[n] for n in names]
    return list(expected)


def check_symbolic_forward(sym: Any, location: Any, expected: Any, rtol: Any = None,
                           atol: Any = None, aux_states: Any = None, ctx: Any = None,
                           equal_nan: bool = False, dtype: Any = np.float32) -> list:
    """Run ``sym`` forward at ``location`` (dict or list of arguments) and compare each output
    with ``expected`` (list, or dict by output name); returns the outputs (NumPy)."""
    exe = _bind(sym, _locations(sym, location, dtype), aux_states, ctx, "null")
    outputs = [o.asnumpy() for o in exe.forward(is_train=False)]
    for name, got, want in zip(sym.list_outputs(), outputs,
                               _expected_list(sym, expected, sym.list_outputs())):
        assert_almost_equal(got, want, rtol, atol, ("forward", f"expected {name}"), equal_nan)
    return outputs


def check_symbolic_backward(sym: Any, location: Any, out_grads: Any, expected: Any,
                            rtol: Any = None, atol: Any = None, aux_states: Any = None,
                            grad_req: Any = "write", ctx: Any = None, grad_stypes: Any = None,
                            equal_nan: bool = False, dtype: Any = np.float32) -> dict:
    """Run forward and backward with head gradients ``out_grads`` and compare the argument
    gradients with ``expected`` (dict by argument name, or list in argument order)."""
    from portable.ndarray import array

    values = _locations(sym, location, dtype)
    exe = _bind(sym, values, aux_states, ctx, grad_req)
    exe.forward(is_train=True)
    heads = list(out_grads.values()) if isinstance(out_grads, Mapping) else list(out_grads)
    exe.backward([array(_host(g).astype(dtype), ctx=exe.device) for g in heads])
    names = sym.list_arguments()
    wanted = expected if isinstance(expected, Mapping) else dict(zip(names, expected))
    grads = {n: g.asnumpy() for n, g in exe.grad_dict.items()}
    for name, want in wanted.items():
        if want is None:
            continue
        assert_almost_equal(grads[name], want, rtol, atol,
                            (f"backward of {name}", f"expected {name}"), equal_nan)
    return grads


def check_numeric_gradient(sym: Any, location: Any, aux_states: Any = None,
                           numeric_eps: float | None = None, rtol: float | None = None,
                           atol: float | None = None, grad_nodes: Any = None,
                           use_forward_train: bool = True, ctx: Any = None,
                           grad_stype_dict: Any = None, dtype: Any = np.float32) -> None:
    """Compare ``sym``'s symbolic gradient with central finite differences of
    ``sum(output * random projection)``, as MXNet does.

    Args:
        grad_nodes: the arguments to check (all by default).
        numeric_eps: the finite-difference step (MXNet's per-dtype default).
        rtol, atol: the tolerances (default 1e-2 and MXNet's per-dtype atol).
    """
    from portable.ndarray import array

    dtype = np.dtype(dtype)
    eps = numeric_eps or _NUMERIC_EPS.get(dtype, 1e-4)
    rtol = 1e-2 if rtol is None else rtol
    atol = _ATOLS.get(dtype, 1e-3) if atol is None else atol
    values = _locations(sym, location, dtype)
    nodes = list(grad_nodes or values)
    grad_req = {n: ("write" if n in nodes else "null") for n in values}
    exe = _bind(sym, values, aux_states, ctx, grad_req)
    outputs = exe.forward(is_train=use_forward_train)
    rng = np.random.default_rng(0)
    projections = [rng.normal(size=o.shape).astype(dtype) for o in outputs]
    exe.backward([array(p, ctx=exe.device) for p in projections])
    symbolic = {n: exe.grad_dict[n].asnumpy() for n in nodes}

    def objective() -> float:
        outs = exe.forward(is_train=use_forward_train)
        return float(sum(np.sum(o.asnumpy().astype(np.float64) * p)
                         for o, p in zip(outs, projections)))

    for name in nodes:
        base = values[name].copy()
        numeric = np.zeros(base.shape, dtype=np.float64)
        for index in np.ndindex(base.shape):
            for sign in (1, -1):
                moved = base.copy()
                moved[index] += sign * eps / 2
                exe.arg_dict[name][:] = moved
                numeric[index] += sign * objective() / eps
        exe.arg_dict[name][:] = base
        assert_almost_equal(numeric, symbolic[name].astype(np.float64), rtol, atol,
                            (f"numeric gradient of {name}", f"symbolic gradient of {name}"))


__all__ = ["almost_equal", "assert_almost_equal", "assert_exception", "check_numeric_gradient",
           "check_symbolic_backward", "check_symbolic_forward", "default_context", "get_tols",
           "rand_ndarray", "rand_shape_2d", "rand_shape_3d", "rand_shape_nd", "random_arrays",
           "same", "set_default_context"]
