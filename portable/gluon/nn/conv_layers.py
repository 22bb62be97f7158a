"""Convolution and pooling layers (MXNet 1.x ``gluon.nn``), channels first or last.

``Conv1D/2D/3D`` and ``Conv1D/2D/3DTranspose`` map to the ONNX Conv and ConvTranspose ops with
MXNet's weight layouts ((channels, in_channels / groups, *kernel) and (in_channels,
channels / groups, *kernel)) and symmetric ``padding``; the pools map to MaxPool, AveragePool
(``count_include_pad=True`` by default, as in MXNet) and the global pools. Channels-last
layouts (``NWC``, ``NHWC``, ``NDHWC``) keep MXNet's channels-last weight layout
((channels, *kernel, in_channels / groups)) and run the same ops between transposes.

Example:
    >>> import portable as pt
    >>> conv = Conv2D(8, kernel_size=3, padding=1); conv.initialize()
    >>> conv(pt.nd.ones((2, 3, 5, 5))).shape
    (2, 8, 5, 5)
"""
from __future__ import annotations

from typing import Any

from portable.errors import PortableError
from portable.gluon.block import HybridBlock
from portable.gluon.nn.basic_layers import Activation

_LAYOUTS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
_LAST = {1: "NWC", 2: "NHWC", 3: "NDHWC"}


def _tuple(value: Any, rank: int, what: str) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * rank
    value = tuple(int(v) for v in value)
    if len(value) != rank:
        raise PortableError(f"{what}={value} must have {rank} values")
    return value


def _check_layout(layout: str, rank: int) -> bool:
    """Whether ``layout`` is channels last (else it must be channels first)."""
    if layout not in (_LAYOUTS[rank], _LAST[rank]):
        raise PortableError(f"layout {layout!r} is not supported; use {_LAYOUTS[rank]!r} "
                            f"or {_LAST[rank]!r}")
    return layout == _LAST[rank]


def _to_first(F: Any, x: Any, rank: int) -> Any:  # noqa: N803 - Gluon's F
    """(N, *spatial, C) -> (N, C, *spatial)."""
    return F.transpose(x, perm=[0, rank + 1] + list(range(1, rank + 1)))


def _to_last(F: Any, x: Any, rank: int) -> Any:  # noqa: N803
    """(N, C, *spatial) -> (N, *spatial, C)."""
    return F.transpose(x, perm=[0] + list(range(2, rank + 2)) + [1])


class _Conv(HybridBlock):
    """Shared body of convolutions and transposed convolutions of any rank."""

    def __init__(self, rank: int, channels: int, kernel_size: Any, strides: Any, padding: Any,
                 dilation: Any, groups: int, layout: str, in_channels: int, activation: Any,
                 use_bias: bool, weight_initializer: Any, bias_initializer: Any,
                 transpose: bool = False, output_padding: Any = 0, dtype: Any = "float32",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._last, self._rank = _check_layout(layout, rank), rank
        self._channels, self._groups, self._transpose = channels, groups, transpose
        self._kernel = _tuple(kernel_size, rank, "kernel_size")
        pads = _tuple(padding, rank, "padding")
        self._attrs = {"kernel_shape": list(self._kernel),
                       "strides": list(_tuple(strides, rank, "strides")),
                       "pads": list(pads + pads),
                       "dilations": list(_tuple(dilation, rank, "dilation")), "group": groups}
        if transpose:
            self._attrs["output_padding"] = list(_tuple(output_padding, rank, "output_padding"))
        with self.name_scope():
            self.weight = self.params.get("weight", shape=self._weight_shape(in_channels),
                                          init=weight_initializer, dtype=dtype,
                                          allow_deferred_init=True)
            self.bias = self.params.get("bias", shape=(channels,), init=bias_initializer,
                                        dtype=dtype,
                                        allow_deferred_init=True) if use_bias else None
            self.act = Activation(activation, prefix=f"{activation}_") if activation else None

    def _alias(self) -> str:
        return "conv"

    def _weight_shape(self, in_channels: int) -> tuple[int, ...]:
        if self._transpose:
            pair = (in_channels, self._channels // self._groups)
        else:
            pair = (self._channels, in_channels // self._groups if in_channels else 0)
        if self._last:  # MXNet's channels-last weights: (out, *kernel, in)
            return (pair[0],) + self._kernel + (pair[1],)
        return pair + self._kernel

    def infer_shape(self, x: Any, *args: Any) -> None:
        in_channels = x.shape[-1] if self._last else x.shape[1]
        if in_channels % self._groups:
            raise PortableError(f"{self.name}: {in_channels} input channels are not divisible "
                                f"by groups={self._groups}")
        self.weight.shape = self._weight_shape(in_channels)

    def hybrid_forward(self, F: Any, x: Any, weight: Any, bias: Any = None) -> Any:
        op = F.conv_transpose if self._transpose else F.conv
        if self._last:
            x, weight = _to_first(F, x, self._rank), _to_first(F, weight, self._rank)
        out = op(x, weight, bias, **self._attrs)
        out = _to_last(F, out, self._rank) if self._last else out
        return self.act(out) if self.act is not None else out

    def __repr__(self) -> str:
        shape = self.weight.shape
        inputs = shape[0] if self._transpose else shape[-1 if self._last else 1] * self._groups
        return (f"{type(self).__name__}({inputs or None} -> {self._channels}, "
                f"kernel_size={self._kernel}, stride={tuple(self._attrs['strides'])})")


def _conv_class(name: str, rank: int, transpose: bool) -> type:
    def __init__(self, channels: int, kernel_size: Any, strides: Any = 1, padding: Any = 0,
                 *args: Any, **kwargs: Any) -> None:
        positional = ("output_padding",) * transpose + (
            "dilation", "groups", "layout", "activation", "use_bias", "weight_initializer",
            "bias_initializer", "in_channels")
        kwargs.update(zip(positional, args))
        _Conv.__init__(self, rank, channels, kernel_size, strides, padding,
                       kwargs.pop("dilation", 1), kwargs.pop("groups", 1),
                       kwargs.pop("layout", _LAYOUTS[rank]), kwargs.pop("in_channels", 0),
                       kwargs.pop("activation", None), kwargs.pop("use_bias", True),
                       kwargs.pop("weight_initializer", None),
                       kwargs.pop("bias_initializer", "zeros"), transpose=transpose, **kwargs)

    kind = "transposed convolution" if transpose else "convolution"
    doc = (f"{rank}-D {kind} (MXNet ``gluon.nn.{name}``): ``{name}(channels, kernel_size, "
           f"strides=1, padding=0, {'output_padding=0, ' if transpose else ''}dilation=1, "
           f"groups=1, layout={_LAYOUTS[rank]!r}, activation=None, use_bias=True, "
           f"weight_initializer=None, bias_initializer='zeros', in_channels=0)``; "
           f"in_channels=0 is inferred on the first forward pass.")
    return type(name, (_Conv,), {"__init__": __init__, "__doc__": doc,
                                 "__module__": __name__})


Conv1D = _conv_class("Conv1D", 1, False)
Conv2D = _conv_class("Conv2D", 2, False)
Conv3D = _conv_class("Conv3D", 3, False)
Conv1DTranspose = _conv_class("Conv1DTranspose", 1, True)
Conv2DTranspose = _conv_class("Conv2DTranspose", 2, True)
Conv3DTranspose = _conv_class("Conv3DTranspose", 3, True)


class _Pooling(HybridBlock):
    """Max or average pooling over windows, or over everything (global)."""

    def __init__(self, rank: int, pool_type: str, pool_size: Any = 2, strides: Any = None,
                 padding: Any = 0, layout: str | None = None, ceil_mode: bool = False,
                 count_include_pad: bool = True, global_pool: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._last, self._rank = _check_layout(layout or _LAYOUTS[rank], rank), rank
        self._pool_type, self._global = pool_type, global_pool
        kernel = _tuple(pool_size, rank, "pool_size")
        pads = _tuple(padding, rank, "padding")
        self._attrs = {"kernel_shape": list(kernel), "pads": list(pads + pads),
                       "strides": list(_tuple(strides if strides is not None else kernel, rank,
                                              "strides")),
                       "ceil_mode": int(ceil_mode)}
        if pool_type == "avg":
            self._attrs["count_include_pad"] = int(count_include_pad)

    def _alias(self) -> str:
        return "pool"

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        if self._last:
            return _to_last(F, self._pool(F, _to_first(F, x, self._rank)), self._rank)
        return self._pool(F, x)

    def _pool(self, F: Any, x: Any) -> Any:  # noqa: N803
        if self._global:
            return F.global_max_pool(x) if self._pool_type == "max" else \
                F.global_average_pool(x)
        if self._pool_type == "max":
            return F.max_pool(x, **self._attrs)
        return F.average_pool(x, **self._attrs)

    def __repr__(self) -> str:
        if self._global:
            return f"{type(self).__name__}()"
        return (f"{type(self).__name__}(size={tuple(self._attrs['kernel_shape'])}, "
                f"stride={tuple(self._attrs['strides'])}, "
                f"padding={tuple(self._attrs['pads'][:len(self._attrs['strides'])])}, "
                f"ceil_mode={bool(self._attrs['ceil_mode'])})")


def _pool_class(name: str, rank: int, pool_type: str, global_pool: bool) -> type:
    if global_pool:
        def __init__(self, layout: str | None = None, **kwargs: Any) -> None:
            _Pooling.__init__(self, rank, pool_type, 1, None, 0, layout, global_pool=True,
                              **kwargs)
        signature = f"{name}(layout={_LAYOUTS[rank]!r})"
    else:
        def __init__(self, pool_size: Any = 2, strides: Any = None, padding: Any = 0,
                     layout: str | None = None, ceil_mode: bool = False,
                     *args: Any, **kwargs: Any) -> None:
            if args:
                kwargs["count_include_pad"] = args[0]
            _Pooling.__init__(self, rank, pool_type, pool_size, strides, padding, layout,
                              ceil_mode, **kwargs)
        extra = ", count_include_pad=True" if pool_type == "avg" else ""
        signature = (f"{name}(pool_size=2, strides=None (= pool_size), padding=0, "
                     f"layout={_LAYOUTS[rank]!r}, ceil_mode=False{extra})")
    kind = "global " if global_pool else ""
    doc = f"{rank}-D {kind}{pool_type} pooling (MXNet ``gluon.nn.{name}``): ``{signature}``."
    return type(name, (_Pooling,), {"__init__": __init__, "__doc__": doc,
                                    "__module__": __name__})


MaxPool1D = _pool_class("MaxPool1D", 1, "max", False)
MaxPool2D = _pool_class("MaxPool2D", 2, "max", False)
MaxPool3D = _pool_class("MaxPool3D", 3, "max", False)
AvgPool1D = _pool_class("AvgPool1D", 1, "avg", False)
AvgPool2D = _pool_class("AvgPool2D", 2, "avg", False)
AvgPool3D = _pool_class("AvgPool3D", 3, "avg", False)
GlobalMaxPool1D = _pool_class("GlobalMaxPool1D", 1, "max", True)
GlobalMaxPool2D = _pool_class("GlobalMaxPool2D", 2, "max", True)
GlobalMaxPool3D = _pool_class("GlobalMaxPool3D", 3, "max", True)
GlobalAvgPool1D = _pool_class("GlobalAvgPool1D", 1, "avg", True)
GlobalAvgPool2D = _pool_class("GlobalAvgPool2D", 2, "avg", True)
GlobalAvgPool3D = _pool_class("GlobalAvgPool3D", 3, "avg", True)
