"""Basic Gluon layers (MXNet 1.x ``gluon.nn``): containers, Dense, activations, Dropout,
Embedding, Flatten, BatchNorm, LayerNorm and lambdas.

Every layer is written once in ``hybrid_forward`` with op functions that ``portable.nd`` and
``portable.sym`` both generate from the op table (``F.gemm``, ``F.batch_normalization``...),
so it runs imperatively, traced into a Symbol, or compiled by ``hybridize()``.

Example:
    >>> import portable as pt
    >>> layer = Dense(3, in_units=4); layer.initialize()
    >>> layer(pt.nd.ones((2, 4))).shape
    (2, 3)
"""
from __future__ import annotations

from math import prod
from typing import Any, Callable

from portable.errors import PortableError
from portable.gluon.block import Block, HybridBlock

# MXNet act_type -> the computation, on F = portable.nd or portable.sym
ACTIVATIONS: dict[str, Callable[[Any, Any], Any]] = {
    "relu": lambda F, x: F.relu(x),
    "sigmoid": lambda F, x: F.sigmoid(x),
    "tanh": lambda F, x: F.tanh(x),
    "softrelu": lambda F, x: F.softplus(x),
    "softsign": lambda F, x: F.div(x, F.add(F.abs(x), 1.0)),
    "gelu": lambda F, x: F.gelu(x),
}


def _sequence_step(block: Block, x: Any, args: tuple) -> tuple[Any, tuple]:
    """One step of a sequential container: a block returning several values passes the
    first on as ``x`` and the rest as extra arguments (MXNet's rule)."""
    out = block(x, *args)
    if isinstance(out, (tuple, list)):
        return out[0], tuple(out[1:])
    return out, ()


class Sequential(Block):
    """Stacks blocks; each one's output is the next one's input.

    Example:
        >>> net = Sequential(); net.add(Dense(4), Dense(2))
    """

    def add(self, *blocks: Block) -> None:
        for block in blocks:
            self.register_child(block)

    def forward(self, x: Any, *args: Any) -> Any:
        for block in self._children.values():
            x, args = _sequence_step(block, x, args)
        return (x,) + args if args else x

    def __getitem__(self, key: int | slice) -> Any:
        children = list(self._children.values())[key]
        if not isinstance(key, slice):
            return children
        net = type(self)(prefix=self._prefix)
        with net.name_scope():
            net.add(*children)
        return net

    def __len__(self) -> int:
        return len(self._children)


class HybridSequential(HybridBlock):
    """Stacks HybridBlocks; hybridizable as a whole."""

    add = Sequential.add
    __getitem__ = Sequential.__getitem__
    __len__ = Sequential.__len__

    def hybrid_forward(self, F: Any, x: Any, *args: Any) -> Any:
        for block in self._children.values():
            x, args = _sequence_step(block, x, args)
        return (x,) + args if args else x


class Dense(HybridBlock):
    """A fully connected layer: ``activation(flatten(x) @ weight.T + bias)``.

    Args:
        units: output size.
        activation: an act_type (``'relu'``...) or None.
        use_bias: add a bias.
        flatten: flatten all but the first axis of the input; otherwise the layer applies to
            the last axis.
        dtype: parameter dtype.
        weight_initializer, bias_initializer: the parameters' own initializers.
        in_units: input size; 0 infers it on the first forward pass.
    """

    def __init__(self, units: int, activation: str | None = None, use_bias: bool = True,
                 flatten: bool = True, dtype: Any = "float32", weight_initializer: Any = None,
                 bias_initializer: Any = "zeros", in_units: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._units, self._in_units, self._flatten = units, in_units, flatten
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(units, in_units), dtype=dtype,
                                          init=weight_initializer, allow_deferred_init=True)
            self.bias = self.params.get("bias", shape=(units,), dtype=dtype,
                                        init=bias_initializer,
                                        allow_deferred_init=True) if use_bias else None
            self.act = Activation(activation, prefix=f"{activation}_") if activation else None

    def infer_shape(self, x: Any, *args: Any) -> None:
        in_units = prod(x.shape[1:]) if self._flatten else x.shape[-1]
        self.weight.shape = (self._units, in_units)

    def hybrid_forward(self, F: Any, x: Any, weight: Any, bias: Any = None) -> Any:
        if self._flatten:
            out = F.gemm(F.flatten(x, axis=1), weight, bias, transB=1)
        else:
            out = F.matmul(x, F.transpose(weight, perm=[1, 0]))
            if bias is not None:
                out = F.add(out, bias)
        return self.act(out) if self.act is not None else out

    def __repr__(self) -> str:
        shape = self.weight.shape
        act = self.act._act_type if self.act is not None else "linear"
        return f"Dense({shape[1] or None} -> {shape[0]}, {act})"


class Activation(HybridBlock):
    """An elementwise activation: ``relu``, ``sigmoid``, ``tanh``, ``softrelu``,
    ``softsign`` or ``gelu``."""

    def __init__(self, activation: str, **kwargs: Any) -> None:
        if activation not in ACTIVATIONS:
            raise PortableError(f"unknown activation {activation!r}; known: "
                                f"{sorted(ACTIVATIONS)}")
        self._act_type = activation
        super().__init__(**kwargs)

    def _alias(self) -> str:
        return self._act_type

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return ACTIVATIONS[self._act_type](F, x)

    def __repr__(self) -> str:
        return f"Activation({self._act_type})"


class Dropout(HybridBlock):
    """Zeroes a ``rate`` share of the elements in training (scaling the rest by
    ``1 / (1 - rate)``); the identity in inference."""

    def __init__(self, rate: float, axes: tuple = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise PortableError(f"Dropout rate must be in [0, 1), got {rate}")
        if axes:
            raise PortableError("Dropout(axes=...) (shared masks) is not supported")
        self._rate = float(rate)

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        if self._rate == 0:
            return x
        from portable import symbol as sym
        from portable.symbol.ops import constant

        # The ratio is a scalar input: imperatively it takes x's dtype; a symbol constant
        # would default to float32, so give it float64 and float64 networks stay exact.
        ratio = constant(self._rate, dtype="float64") if F is sym else self._rate
        return F.dropout(x, ratio)

    def __repr__(self) -> str:
        return f"Dropout(p = {self._rate}, axes=())"


class Embedding(HybridBlock):
    """Maps integer indices (given as any dtype) to rows of a (input_dim, output_dim) table."""

    def __init__(self, input_dim: int, output_dim: int, dtype: Any = "float32",
                 weight_initializer: Any = None, sparse_grad: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if sparse_grad:
            raise PortableError("Embedding(sparse_grad=True) is not supported")
        self._input_dim, self._output_dim = input_dim, output_dim
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(input_dim, output_dim), dtype=dtype,
                                          init=weight_initializer, allow_deferred_init=True)

    def hybrid_forward(self, F: Any, x: Any, weight: Any) -> Any:
        return F.gather(weight, F.cast(x, to=7), axis=0)  # 7: int64

    def __repr__(self) -> str:
        return f"Embedding({self._input_dim} -> {self._output_dim}, {self.weight.dtype})"


class Flatten(HybridBlock):
    """Flattens all axes but the first: (N, ...) -> (N, prod(...))."""

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return F.flatten(x, axis=1)

    def __repr__(self) -> str:
        return "Flatten"


class BatchNorm(HybridBlock):
    """Batch normalisation over axis 1, with running statistics updated in training as
    ``running = momentum * running + (1 - momentum) * batch`` (biased batch variance).

    Args:
        axis: the channel axis; only 1 (NCHW layouts) is supported.
        momentum, epsilon: as in MXNet.
        center, scale: learn beta / gamma (otherwise they stay 0 / 1).
        use_global_stats: not supported (raises).
        in_channels: 0 infers it on the first forward pass.
    """

    def __init__(self, axis: int = 1, momentum: float = 0.9, epsilon: float = 1e-5,
                 center: bool = True, scale: bool = True, use_global_stats: bool = False,
                 beta_initializer: Any = "zeros", gamma_initializer: Any = "ones",
                 running_mean_initializer: Any = "zeros",
                 running_variance_initializer: Any = "ones", in_channels: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if axis != 1:
            raise PortableError(f"BatchNorm(axis={axis}) is not supported: the channel axis "
                                f"must be 1 (transpose the input first)")
        if use_global_stats:
            raise PortableError("BatchNorm(use_global_stats=True) is not supported; run the "
                                "block in predict mode (autograd.predict_mode) instead")
        self._momentum, self._epsilon = float(momentum), float(epsilon)
        self._scale = bool(scale)
        shape = (in_channels,)
        with self.name_scope():
            self.gamma = self.params.get("gamma", grad_req="write" if scale else "null",
                                         shape=shape, init=gamma_initializer,
                                         allow_deferred_init=True, differentiable=scale)
            self.beta = self.params.get("beta", grad_req="write" if center else "null",
                                        shape=shape, init=beta_initializer,
                                        allow_deferred_init=True, differentiable=center)
            self.running_mean = self.params.get("running_mean", grad_req="null", shape=shape,
                                                init=running_mean_initializer,
                                                allow_deferred_init=True, differentiable=False)
            self.running_var = self.params.get("running_var", grad_req="null", shape=shape,
                                               init=running_variance_initializer,
                                               allow_deferred_init=True, differentiable=False)

    def infer_shape(self, x: Any, *args: Any) -> None:
        for param in (self.gamma, self.beta, self.running_mean, self.running_var):
            param.shape = (x.shape[1],)

    def hybrid_forward(self, F: Any, x: Any, gamma: Any, beta: Any, running_mean: Any,
                       running_var: Any) -> Any:
        if not self._scale:  # MXNet's fix_gamma: a stored gamma (from a file) is not applied
            gamma = F.ones_like(gamma)
        return F.batch_normalization(x, gamma, beta, running_mean, running_var,
                                     epsilon=self._epsilon, momentum=self._momentum)

    def __repr__(self) -> str:
        return (f"BatchNorm(axis=1, eps={self._epsilon}, momentum={self._momentum}, "
                f"in_channels={self.gamma.shape[0] or None})")


class LayerNorm(HybridBlock):
    """Layer normalisation over the last axis, with learned gamma and beta."""

    def __init__(self, axis: int = -1, epsilon: float = 1e-5, center: bool = True,
                 scale: bool = True, beta_initializer: Any = "zeros",
                 gamma_initializer: Any = "ones", in_channels: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if axis != -1:
            raise PortableError(f"LayerNorm(axis={axis}) is not supported: it normalises the "
                                f"last axis (axis=-1)")
        self._epsilon = float(epsilon)
        with self.name_scope():
            self.gamma = self.params.get("gamma", grad_req="write" if scale else "null",
                                         shape=(in_channels,), init=gamma_initializer,
                                         allow_deferred_init=True, differentiable=scale)
            self.beta = self.params.get("beta", grad_req="write" if center else "null",
                                        shape=(in_channels,), init=beta_initializer,
                                        allow_deferred_init=True, differentiable=center)

    def infer_shape(self, x: Any, *args: Any) -> None:
        self.gamma.shape = self.beta.shape = (x.shape[-1],)

    def hybrid_forward(self, F: Any, x: Any, gamma: Any, beta: Any) -> Any:
        return F.layer_normalization(x, gamma, beta, axis=-1, epsilon=self._epsilon)

    def __repr__(self) -> str:
        return f"LayerNorm(eps={self._epsilon}, in_channels={self.gamma.shape[0] or None})"


class Lambda(Block):
    """Wraps a function of NDArrays (or the name of an ``nd`` function) as a Block.

    Example:
        >>> block = Lambda(lambda x: x * 2)
    """

    def __init__(self, function: str | Callable[..., Any], prefix: str | None = None) -> None:
        super().__init__(prefix=prefix)
        if isinstance(function, str):
            from portable import ndarray as nd

            if not hasattr(nd, function):
                raise PortableError(f"Lambda: portable.nd has no function {function!r}")
            function = getattr(nd, function)
        self._func = function

    def forward(self, *args: Any) -> Any:
        return self._func(*args)

    def __repr__(self) -> str:
        return f"Lambda({getattr(self._func, '__name__', self._func)})"


class HybridLambda(HybridBlock):
    """Wraps ``function(F, x, *args)`` (or the name of a function both ``F`` namespaces
    have) as a HybridBlock.

    Example:
        >>> block = HybridLambda(lambda F, x: F.relu(x))
    """

    def __init__(self, function: str | Callable[..., Any], prefix: str | None = None) -> None:
        super().__init__(prefix=prefix)
        if isinstance(function, str):
            name = function

            def function(F: Any, *args: Any) -> Any:
                if not hasattr(F, name):
                    raise PortableError(f"HybridLambda: {F.__name__} has no function {name!r}")
                return getattr(F, name)(*args)

            function.__name__ = name
        self._func = function

    def hybrid_forward(self, F: Any, x: Any, *args: Any) -> Any:
        return self._func(F, x, *args)

    def __repr__(self) -> str:
        return f"HybridLambda({getattr(self._func, '__name__', self._func)})"
