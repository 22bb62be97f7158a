"""``gluon.contrib.nn`` (MXNet 1.x): ``Identity``, ``Concurrent``, ``HybridConcurrent``,
``SyncBatchNorm`` (batch norm on this one device) and ``PixelShuffle1D/2D/3D``.

Example:
    >>> import portable as mx
    >>> net = HybridConcurrent(axis=1)
    >>> net.add(Identity(), Identity())
    >>> net(mx.nd.ones((2, 3))).shape
    (2, 6)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from portable.errors import ShapeError
from portable.gluon.block import HybridBlock
from portable.gluon.nn.basic_layers import BatchNorm, HybridSequential, Sequential


class Identity(HybridBlock):
    """Returns its input unchanged (a placeholder branch in a Concurrent block)."""

    def hybrid_forward(self, F: Any, x: Any) -> Any:  # noqa: N803 - Gluon's F
        return x


class Concurrent(Sequential):
    """Runs every child on the same input and concatenates their outputs along ``axis``.

    Args:
        axis: the axis to concatenate along (MXNet's default -1).
    """

    def __init__(self, axis: int = -1, prefix: str | None = None, params: Any = None) -> None:
        super().__init__(prefix=prefix, params=params)
        self.axis = axis

    def forward(self, x: Any) -> Any:
        from portable import nd

        outputs = [block(x) for block in self._children.values()]
        return nd.concat(*outputs, dim=self.axis)


class HybridConcurrent(HybridSequential):
    """The hybridizable Concurrent: children's outputs concatenated along ``axis``."""

    def __init__(self, axis: int = -1, prefix: str | None = None, params: Any = None) -> None:
        super().__init__(prefix=prefix, params=params)
        self.axis = axis

    def hybrid_forward(self, F: Any, x: Any) -> Any:  # noqa: N803
        outputs = [block(x) for block in self._children.values()]
        return F.concat(*outputs, dim=self.axis)


class SyncBatchNorm(BatchNorm):
    """MXNet's cross-device batch norm; on one device it is BatchNorm (``num_devices`` is
    accepted and ignored).

    Args:
        in_channels, momentum, epsilon, center, scale, use_global_stats: as BatchNorm's.
    """

    def __init__(self, in_channels: int = 0, num_devices: int | None = None,
                 momentum: float = 0.9, epsilon: float = 1e-5, center: bool = True,
                 scale: bool = True, use_global_stats: bool = False,
                 beta_initializer: Any = "zeros", gamma_initializer: Any = "ones",
                 running_mean_initializer: Any = "zeros",
                 running_variance_initializer: Any = "ones", **kwargs: Any) -> None:
        super().__init__(1, momentum, epsilon, center, scale, use_global_stats,
                         beta_initializer, gamma_initializer, running_mean_initializer,
                         running_variance_initializer, in_channels, **kwargs)


class _PixelShuffle(HybridBlock):
    """(N, C * prod(f), *S) -> (N, C, *(S * f)): channel blocks moved into space."""

    def __init__(self, rank: int, factor: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        factors = (factor,) * rank if isinstance(factor, int) else tuple(int(f) for f in factor)
        if len(factors) != rank:
            raise ShapeError(f"PixelShuffle{rank}D: factor {factor} needs {rank} values")
        self._rank, self._factors = rank, factors

    def hybrid_forward(self, F: Any, x: Any) -> Any:  # noqa: N803
        rank, factors = self._rank, self._factors
        if rank == 2 and factors[0] == factors[1]:  # ONNX's DepthToSpace in CRD order
            return F.depth_to_space(x, blocksize=factors[0], mode="CRD")
        shape = getattr(x, "shape", None)
        if not isinstance(shape, tuple):
            raise ShapeError(f"{type(self).__name__}({factors}) needs the input's shape: run it "
                             f"imperatively (only square 2-D factors hybridize)")
        n, c, spatial = shape[0], shape[1], shape[2:]
        channels = c // int(np.prod(factors))
        if channels * int(np.prod(factors)) != c:
            raise ShapeError(f"{type(self).__name__}: {c} channels are not divisible by "
                             f"{int(np.prod(factors))} (factors {factors})")
        # (N, C*f1*..., S1, ...) -> (N, C, f1, ..., S1, ...) -> (N, C, S1, f1, S2, f2, ...)
        x = F.reshape(x, shape=(n, channels, *factors, *spatial))
        perm = [0, 1]
        for i in range(rank):
            perm += [2 + rank + i, 2 + i]
        x = F.transpose(x, axes=tuple(perm))
        return F.reshape(x, shape=(n, channels, *(s * f for s, f in zip(spatial, factors))))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._factors if self._rank > 1 else self._factors[0]})"


class PixelShuffle1D(_PixelShuffle):
    """(N, C * f, W) -> (N, C, W * f)."""

    def __init__(self, factor: int, **kwargs: Any) -> None:
        super().__init__(1, factor, **kwargs)


class PixelShuffle2D(_PixelShuffle):
    """(N, C * f1 * f2, H, W) -> (N, C, H * f1, W * f2)."""

    def __init__(self, factor: Any, **kwargs: Any) -> None:
        super().__init__(2, factor, **kwargs)


class PixelShuffle3D(_PixelShuffle):
    """(N, C * f1 * f2 * f3, D, H, W) -> (N, C, D * f1, H * f2, W * f3)."""

    def __init__(self, factor: Any, **kwargs: Any) -> None:
        super().__init__(3, factor, **kwargs)
