"""MXNet 1.x's symbol functions (``mx.sym.Concat``, ``mx.sym.dot``, ``mx.sym.sum(x, axis=1)``
...) made from the MXNet-JSON converters, so that a call and a loaded file build the same nodes.

MXNet's own symbol functions turn their keyword arguments into string attributes of a node;
here each function does the same and hands them to the op's converter
(``mxnet_converters.CONVERTERS``), which reads them with MXNet 1.9.1's defaults. A function:
(1) places its Symbol inputs by MXNet's argument names for the op (``data``, ``lhs``/``rhs``,
``weight``, ``gamma``...; variadic ops such as ``Concat`` take ``*args``), positionally or by
keyword; (2) creates the variables MXNet creates for inputs left out (``<name>_weight``), which
the converter gives shape rules; (3) writes every other keyword as MXNet writes it (tuples
``"(2, 3)"``, bools ``"True"``, dtypes by name); (4) runs the converter under the node's name
(``name`` or an automatic ``concat0``), and keeps those strings as the node's attributes
(``list_attr``).

Example:
    >>> import portable as mx
    >>> a, b = mx.sym.var("a"), mx.sym.var("b")
    >>> mx.sym.Concat(a, b, dim=0).infer_shape(a=(2, 3), b=(4, 3))[1]
    [(6, 3)]
"""
from __future__ import annotations

from typing import Any, Callable, NoReturn

import numpy as np

from portable.errors import OpError, PortableError, SerializationError
from portable.symbol import mxnet_tensor_ops  # noqa: F401  (registers its converters)
from portable.symbol.mxnet_builder import MXNetAttrs, NodeBuilder
from portable.symbol.mxnet_converters import CONVERTERS
from portable.symbol.nodes import SymNode, auto_name
from portable.symbol.symbol import Symbol, set_user_attrs

__all__ = ["SIGNATURES", "mxnet_function", "mxnet_functions"]

# op -> (its inputs in MXNet's order, a trailing "*" for variadic; its attributes in order),
# as MXNet 1.9.1 lists them: positional arguments fill the inputs, then the attributes.
SIGNATURES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _signature(inputs: tuple[str, ...], attrs: tuple[str, ...], *ops: str) -> None:
    for op in ops:
        SIGNATURES[op] = (inputs, attrs)


_signature(("data",), (), "BlockGrad", "Flatten", "_copy", "abs", "arccos", "arccosh", "arcsin",
           "arcsinh", "arctan", "arctanh", "ceil", "cos", "cosh", "erf", "exp", "expm1", "fix",
           "flatten", "floor", "identity", "log", "log10", "log1p", "log2", "negative",
           "ones_like", "reciprocal", "relu", "rint", "round", "rsqrt", "sigmoid", "sign", "sin",
           "sinh", "softsign", "sqrt", "square", "stop_gradient", "tan", "tanh", "trunc",
           "zeros_like", "make_loss")
_signature(("lhs", "rhs"), (), "_Div", "_Maximum", "_Minimum", "_Minus", "_Mul", "_Plus",
           "_Power", "_add", "_div", "_equal", "_greater", "_greater_equal", "_lesser",
           "_lesser_equal", "_maximum", "_minimum", "_minus", "_mul", "_not_equal", "_plus",
           "_power", "_sub", "broadcast_add", "broadcast_div", "broadcast_equal",
           "broadcast_greater", "broadcast_greater_equal", "broadcast_lesser",
           "broadcast_lesser_equal", "broadcast_maximum", "broadcast_minimum", "broadcast_minus",
           "broadcast_mul", "broadcast_not_equal", "broadcast_plus", "broadcast_power",
           "broadcast_sub", "elemwise_add", "elemwise_div", "elemwise_mul", "elemwise_sub")
_signature(("data",), ("scalar", "is_int"), "_div_scalar", "_equal_scalar",
           "_greater_equal_scalar", "_greater_scalar", "_lesser_equal_scalar", "_lesser_scalar",
           "_maximum_scalar", "_minimum_scalar", "_minus_scalar", "_mul_scalar",
           "_not_equal_scalar", "_plus_scalar", "_power_scalar", "_rdiv_scalar",
           "_rminus_scalar", "_rpower_scalar")
_signature(("data",), ("axis", "keepdims", "exclude"), "max", "max_axis", "mean", "min",
           "min_axis", "prod", "sum", "sum_axis")
_signature(("data",), ("axis",), "expand_dims", "squeeze")
_signature(("data",), ("dtype",), "Cast", "cast")
_signature(("args*",), (), "ElementWiseSum", "add_n", "_sum")
_signature(("data", "label"), ("grad_scale",), "LinearRegressionOutput",
           "LogisticRegressionOutput", "MAERegressionOutput")
_signature(("data",), ("shape",), "broadcast_to")
_signature(("data*",), ("num_args", "dim"), "Concat", "concat")
_signature(("data",), ("mode", "pad_width", "constant_value"), "Pad", "pad")
_signature(("data",), ("shape", "reverse", "target_shape", "keep_highest"), "Reshape", "reshape")
_signature(("data",), ("num_outputs", "axis", "squeeze_axis"), "SliceChannel", "split")
_signature(("data", "label"), ("grad_scale", "ignore_label", "multi_output", "use_ignore",
                               "preserve_shape", "normalization", "out_grad", "smooth_alpha"),
           "Softmax", "SoftmaxOutput")
_signature(("data",), ("axis", "keepdims"), "argmax", "argmin")
_signature(("lhs", "rhs"), ("transpose_a", "transpose_b", "forward_stype"), "batch_dot", "dot")
_signature(("data",), ("begin", "end", "step"), "crop", "slice")
_signature(("data",), ("axis", "temperature", "dtype", "use_length"), "log_softmax")
_signature(("data", "length"), ("axis", "temperature", "dtype", "use_length"), "softmax")
_signature(("data",), ("act_type",), "Activation")
_signature(("data", "gamma", "beta", "moving_mean", "moving_var"),
           ("eps", "momentum", "fix_gamma", "use_global_stats", "output_mean_var", "axis",
            "cudnn_off", "min_calib_range", "max_calib_range"), "BatchNorm")
_signature(("data", "gamma", "beta"), ("eps", "momentum", "fix_gamma", "use_global_stats",
                                       "output_mean_var"), "BatchNorm_v1")
_signature(("data", "weight", "bias"), ("kernel", "stride", "dilate", "pad", "num_filter",
                                        "num_group", "workspace", "no_bias", "cudnn_tune",
                                        "cudnn_off", "layout"), "Convolution")
_signature(("data", "weight", "bias"), ("kernel", "stride", "dilate", "pad", "adj",
                                        "target_shape", "num_filter", "num_group", "workspace",
                                        "no_bias", "cudnn_tune", "cudnn_off", "layout"),
           "Deconvolution")
_signature(("data",), ("p", "mode", "axes", "cudnn_off"), "Dropout")
_signature(("data", "weight"), ("input_dim", "output_dim", "dtype", "sparse_grad"), "Embedding")
_signature(("data", "weight", "bias"), ("num_hidden", "no_bias", "flatten"), "FullyConnected")
_signature(("data", "gamma", "beta"), ("eps",), "InstanceNorm")
_signature(("data",), ("alpha", "beta", "knorm", "nsize"), "LRN")
_signature(("data", "gamma", "beta"), ("axis", "eps", "output_mean_var"), "LayerNorm")
_signature(("data", "gamma"), ("act_type", "slope", "lower_bound", "upper_bound"), "LeakyReLU")
_signature(("data",), ("kernel", "pool_type", "global_pool", "cudnn_off", "pooling_convention",
                       "stride", "pad", "p_value", "count_include_pad", "layout"), "Pooling")
_signature(("data",), ("kernel", "pool_type", "global_pool", "pooling_convention", "stride",
                       "pad"), "Pooling_v1")
_signature(("data",), ("mode",), "SoftmaxActivation")
_signature(("data*",), ("scale", "num_filter", "sample_type", "multi_input_mode", "num_args",
                        "workspace"), "UpSampling")
_signature(("lhs", "rhs"), ("lhs_axes", "rhs_axes"), "broadcast_like")
_signature(("data",), ("a_min", "a_max"), "clip")
_signature(("data",), ("ord", "axis", "out_dtype", "keepdims"), "norm")
_signature(("data",), ("axis", "begin", "end"), "slice_axis")
_signature(("data*",), ("axis", "num_args"), "stack")
_signature(("data",), ("axes",), "transpose")
_signature(("condition", "x", "y"), (), "where")
_signature(("data",), ("grad_scale", "valid_thresh", "normalization"), "MakeLoss")

# MXNet's "hidden" attribute keys, stored both as ``__key__`` and ``key`` (nnvm's rule).
HIDDEN_KEYS = ("ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage",
               "profiler_scope")


class _CallAttrs(MXNetAttrs):
    """A call's attribute strings; failures name the call (``mx.sym.Concat``), not a file."""

    def fail(self, message: str) -> NoReturn:
        raise OpError(f"{self.source}: node {self.node!r}: {message}")


def mxnet_string(key: str, value: Any) -> str:
    """``value`` as MXNet writes a keyword argument into a node attribute.

    Example:
        >>> mxnet_string("shape", (2, 3)), mxnet_string("dtype", np.float16)
        ('(2, 3)', 'float16')
    """
    if key in ("dtype", "out_dtype") and value is not None and not isinstance(value, str):
        return np.dtype(value).name
    if isinstance(value, (np.generic, np.ndarray)):
        value = value.tolist()
    if isinstance(value, list):
        value = tuple(value)
    return str(value)


def _inputs_in_use(op: str, names: tuple[str, ...], raw: dict[str, str]) -> tuple[str, ...]:
    """The inputs MXNet lists for ``op`` with these attributes (``no_bias`` drops the bias,
    only a ``prelu`` LeakyReLU has a gamma, only ``use_length`` gives softmax a length)."""
    no_bias_default = "True" if op == "Deconvolution" else "False"
    if raw.get("no_bias", no_bias_default).strip().lower() in ("true", "1"):
        names = tuple(n for n in names if n != "bias")
    if op == "LeakyReLU" and raw.get("act_type", "leaky").strip() != "prelu":
        names = tuple(n for n in names if n != "gamma")
    if op == "softmax" and raw.get("use_length", "False").strip().lower() not in ("true", "1"):
        names = tuple(n for n in names if n != "length")
    return names


def _entry(value: Any, call: str, what: str) -> tuple:
    if not isinstance(value, Symbol):
        raise OpError(f"{call}: {what} must be a Symbol, got {type(value).__name__} "
                      f"(use the *_scalar function or an operator for numbers)")
    if len(value) != 1:
        raise OpError(f"{call}: {what} has {len(value)} outputs; pick one with symbol[i]")
    return value._entries[0]


def mxnet_function(op: str, public_name: str | None = None) -> Callable[..., Symbol]:
    """The MXNet 1.x symbol function of the MXNet op ``op`` (a name of ``SIGNATURES``).

    Args:
        op: the MXNet op name (``"Concat"``, ``"_plus_scalar"``).
        public_name: the name it is called by, for messages (default ``op``).

    Returns:
        ``f(*inputs, name=None, attr=None, **kwargs) -> Symbol``.
    """
    input_names, attr_names = SIGNATURES[op]
    variadic = bool(input_names) and input_names[0].endswith("*")
    call = f"mx.sym.{public_name or op}"

    def fn(*args: Any, name: str | None = None, attr: dict | None = None, out: Any = None,
           **kwargs: Any) -> Symbol:
        given: dict[str, Any] = {}
        if variadic:
            entries = [_entry(v, call, f"input #{i}") for i, v in enumerate(args)]
        else:
            slots = input_names + attr_names
            if len(args) > len(slots):
                raise OpError(f"{call} takes at most {len(slots)} positional arguments "
                              f"({', '.join(slots)}), got {len(args)}")
            given.update(zip(slots, args))
            for key in list(kwargs):
                if key in given:
                    raise OpError(f"{call}: argument {key!r} given twice")
            given.update(kwargs)
            kwargs = {k: v for k, v in given.items() if k not in input_names}
        stray = [k for k, v in kwargs.items() if isinstance(v, Symbol)]
        if stray:
            raise OpError(f"{call} has no input named {stray[0]!r}; its inputs are "
                          f"{', '.join(input_names) or 'none'}")
        raw = {k: mxnet_string(k, v) for k, v in kwargs.items()}
        if variadic and "num_args" in attr_names:
            raw.setdefault("num_args", str(len(entries)))
        node_name = auto_name(op, name)
        if not variadic:
            entries = []
            for input_name in _inputs_in_use(op, input_names, raw):
                value = given.get(input_name)
                entries.append(_entry(value, call, f"input {input_name!r}") if value is not None
                               else (SymNode(None, f"{node_name}_{input_name}"), 0))
        attrs = _CallAttrs(raw, call, node_name, op)
        try:
            outputs = CONVERTERS[op](NodeBuilder(attrs), entries, attrs)
        except SerializationError as exc:  # an attribute value the op's schema refuses
            raise OpError(f"{call}: node {node_name!r}: {exc}") from exc
        except PortableError:
            raise
        except (TypeError, ValueError) as exc:  # a value of the wrong kind in a keyword
            raise OpError(f"{call}: node {node_name!r}: {type(exc).__name__}: {exc}") from exc
        symbol = Symbol(outputs)
        set_user_attrs(symbol, raw, attr)
        return symbol

    fn.__name__ = public_name or op
    inputs_doc = ", ".join(("*" + n.rstrip("*")) if n.endswith("*") else n for n in input_names)
    fn.__doc__ = (f"MXNet 1.x's symbol function {op}({inputs_doc}; "
                  f"{', '.join(attr_names) or 'no attributes'}), with MXNet 1.9.1's defaults.")
    return fn


def _creation(op: str) -> Callable[..., Symbol]:
    """``zeros``/``ones``/``full``: a constant-filled array of ``shape`` (no arguments)."""
    from portable.symbol.symbol import apply_op, constant

    def fn(shape: Any, *args: Any, dtype: Any = None, name: str | None = None,
           attr: dict | None = None, **kwargs: Any) -> Symbol:
        if op == "full":
            if not args and "val" not in kwargs:
                raise OpError("mx.sym.full: the fill value val is required")
            val = args[0] if args else kwargs.pop("val")
        else:
            val = 0.0 if op == "zeros" else 1.0
        kwargs.pop("ctx", None)  # where it runs is the executor's device
        dims = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
        np_dtype = np.dtype(dtype if dtype is not None else np.float32)
        node_name = auto_name(f"_{op}", name)
        symbol = apply_op("ConstantOfShape", [constant(np.asarray(dims, np.int64))],
                          name=node_name, value=np.asarray([val], np_dtype))
        raw = {"shape": mxnet_string("shape", dims), "dtype": np_dtype.name}
        if op == "full":
            raw["value"] = str(val)
        set_user_attrs(symbol, raw, attr)
        return symbol
    fn.__name__ = op
    fn.__doc__ = f"MXNet 1.x's ``sym.{op}(shape, ...)``: an array filled with one value."
    return fn


def arange(start: float, stop: float | None = None, step: float = 1.0, repeat: int = 1,
           infer_range: bool = False, name: str | None = None, dtype: Any = None) -> Symbol:
    """MXNet 1.x's ``sym.arange``: ``start, start + step, ...`` below ``stop``, each value
    ``repeat`` times (float32 unless ``dtype`` says otherwise).

    Example:
        >>> arange(3).eval()[0].asnumpy().tolist()      # doctest: +SKIP
        [0.0, 1.0, 2.0]
    """
    from portable.symbol.symbol import apply_op, constant

    if infer_range:
        raise OpError("mx.sym.arange: infer_range=True is not supported; give stop")
    if stop is None:
        start, stop = 0, start
    np_dtype = np.dtype(dtype if dtype is not None else np.float32)
    # computed in float64 as MXNet does, then cast: the length is that of NumPy's arange
    values = np.arange(start, stop, step, dtype=np.float64)
    repeat = int(repeat)
    if repeat < 1:
        raise OpError(f"mx.sym.arange: repeat={repeat} must be at least 1")
    values = np.repeat(values, repeat).astype(np_dtype)
    return apply_op("Identity", [constant(values, np_dtype)], name=auto_name("_arange", name))


def _scalar_or_symbol(fname: str, tensor_op: str, scalar_op: str, rscalar_op: str | None):
    """MXNet's ``maximum``/``minimum``/``power``: Symbol or number on either side."""
    tensor, scalar, rscalar = (mxnet_function(tensor_op, fname), mxnet_function(scalar_op, fname),
                               mxnet_function(rscalar_op or scalar_op, fname))

    def fn(left: Any, right: Any) -> Symbol:
        if isinstance(left, Symbol) and isinstance(right, Symbol):
            return tensor(left, right)
        if isinstance(left, Symbol):
            return scalar(left, scalar=float(right))
        if isinstance(right, Symbol):
            return rscalar(right, scalar=float(left))
        raise OpError(f"mx.sym.{fname}: at least one argument must be a Symbol")
    fn.__name__ = fname
    fn.__doc__ = f"MXNet 1.x's ``sym.{fname}(left, right)``; either may be a number."
    return fn


def mxnet_functions() -> dict[str, Callable[..., Symbol]]:
    """Every MXNet 1.x symbol function this module makes, by its MXNet name."""
    functions: dict[str, Callable[..., Symbol]] = {
        op: mxnet_function(op) for op in SIGNATURES if op in CONVERTERS}
    for op in ("zeros", "ones", "full"):
        functions[op] = _creation(op)
    functions["arange"] = arange
    functions["maximum"] = _scalar_or_symbol("maximum", "broadcast_maximum", "_maximum_scalar",
                                             None)
    functions["minimum"] = _scalar_or_symbol("minimum", "broadcast_minimum", "_minimum_scalar",
                                             None)
    functions["power"] = _scalar_or_symbol("power", "broadcast_power", "_power_scalar",
                                           "_rpower_scalar")
    return functions
