"""Parameter initializers with MXNet 1.x names (``portable.init.Xavier`` ...), seeded by
``portable.random.seed``.

An initializer is called with a parameter name and an array (NDArray or NumPy) and fills it in
place. The dispatch by name follows MXNet: names ending in ``weight`` get the initializer's own
rule (``sample``), ``bias``/``beta``/``moving_mean``/``min`` zeros, ``gamma``/``moving_var``/
``max`` ones, names starting with ``upsampling`` the bilinear kernel; a name MXNet does not
know also gets the initializer's own rule. An ``InitDesc`` whose ``attrs`` hold ``__init__``
(a ``dumps()`` string) uses that initializer instead, as MXNet does.

Example:
    >>> import portable as pt
    >>> w = pt.nd.zeros((4, 3))
    >>> pt.init.Xavier()("fc_weight", w)
    >>> pt.init.Normal(0.5).dumps()
    '["normal", {"sigma": 0.5}]'
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, Sequence

import numpy as np

from portable import random
from portable.errors import PortableError, ShapeError

# lower-case class name or alias -> initializer class (``create`` and ``dumps`` strings)
INITIALIZERS: dict[str, type] = {}


def _register(*aliases: str) -> Callable[[type], type]:
    def wrap(cls: type) -> type:
        for name in (cls.__name__, *aliases):
            INITIALIZERS[name.lower()] = cls
        return cls
    return wrap


class InitDesc(str):
    """A parameter name carrying its attributes (``__init__``) and the global initializer.

    Args:
        name: the parameter's name.
        attrs: e.g. ``{"__init__": Normal(0.1).dumps()}``.
        global_init: the initializer the model was initialized with.
    """

    def __new__(cls, name: str, attrs: dict | None = None, global_init: Any = None):
        desc = super().__new__(cls, name)
        desc.attrs = dict(attrs or {})
        desc.global_init = global_init
        return desc


# name suffix -> constant fill, in MXNet's order of tests (after ``weight``)
_SUFFIX_FILLS = (("bias", 0.0), ("gamma", 1.0), ("beta", 0.0), ("moving_mean", 0.0),
                 ("running_mean", 0.0), ("moving_var", 1.0), ("running_var", 1.0),
                 ("moving_inv_var", 0.0), ("moving_avg", 0.0), ("min", 0.0), ("max", 1.0))


class Initializer:
    """Base class: ``init(name, array)`` fills ``array`` in place; subclasses implement
    ``sample(shape)``, the rule for weights."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs

    def __call__(self, name: str, array: Any) -> None:
        if isinstance(name, InitDesc) and name.attrs.get("__init__"):
            values = create(name.attrs["__init__"]).sample(tuple(array.shape))
        elif name.startswith("upsampling"):
            values = _bilinear(tuple(array.shape))
        elif name.endswith("weight"):
            values = self.sample(tuple(array.shape))
        else:
            fill = next((v for suffix, v in _SUFFIX_FILLS if name.endswith(suffix)), None)
            values = self.sample(tuple(array.shape)) if fill is None \
                else np.full(tuple(array.shape), fill)
        array[:] = np.asarray(values, dtype=array.dtype)

    def sample(self, shape: tuple[int, ...]) -> np.ndarray:
        """The values of a weight of ``shape`` (float64 or float32; the caller casts)."""
        raise NotImplementedError(f"{type(self).__name__} has no rule for weights")

    def dumps(self) -> str:
        """``'["<name>", {<arguments>}]'``, the string ``create`` rebuilds the initializer from."""
        return json.dumps([type(self).__name__.lower(), self._kwargs])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._kwargs})"


@_register("zeros")
class Zero(Initializer):
    """All zeros."""

    def sample(self, shape):
        return np.zeros(shape)


@_register("ones")
class One(Initializer):
    """All ones."""

    def sample(self, shape):
        return np.ones(shape)


@_register()
class Constant(Initializer):
    """A scalar, or an array broadcast to the parameter's shape."""

    def __init__(self, value: Any) -> None:
        super().__init__(value=value)
        self.value = value

    def sample(self, shape):
        value = self.value.asnumpy() if hasattr(self.value, "asnumpy") else self.value
        return np.broadcast_to(np.asarray(value), shape)

    def dumps(self) -> str:
        value = self.value
        if not np.isscalar(value):
            value = (value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)).tolist()
        return json.dumps([type(self).__name__.lower(), {"value": value}])


@_register()
class Uniform(Initializer):
    """Uniform in ``[-scale, scale]``."""

    def __init__(self, scale: float = 0.07) -> None:
        super().__init__(scale=scale)
        self.scale = scale

    def sample(self, shape):
        return random.generator().uniform(-self.scale, self.scale, size=shape)


@_register()
class Normal(Initializer):
    """Normal with mean 0 and standard deviation ``sigma``."""

    def __init__(self, sigma: float = 0.01) -> None:
        super().__init__(sigma=sigma)
        self.sigma = sigma

    def sample(self, shape):
        return random.generator().normal(0.0, self.sigma, size=shape)


@_register()
class Orthogonal(Initializer):
    """``scale`` times an orthogonal matrix (rows or columns orthonormal) of shape
    ``(shape[0], prod(shape[1:]))``, from the SVD of a uniform or normal random matrix.

    Args:
        scale: the factor.
        rand_type: ``uniform`` or ``normal``.
    """

    def __init__(self, scale: float = 1.414, rand_type: str = "uniform") -> None:
        if rand_type not in ("uniform", "normal"):
            raise PortableError(f"Orthogonal rand_type must be 'uniform' or 'normal', got "
                                f"{rand_type!r}")
        super().__init__(scale=scale, rand_type=rand_type)
        self.scale, self.rand_type = scale, rand_type

    def sample(self, shape):
        rows, cols = shape[0], int(np.prod(shape[1:]))
        rng = random.generator()
        tmp = rng.uniform(-1.0, 1.0, (rows, cols)) if self.rand_type == "uniform" \
            else rng.normal(0.0, 1.0, (rows, cols))
        u, _, v = np.linalg.svd(tmp, full_matrices=False)
        return self.scale * (u if u.shape == tmp.shape else v).reshape(shape)


@_register()
class Xavier(Initializer):
    """Glorot/Xavier: values of scale ``sqrt(magnitude / factor)``, where the factor is the
    fan-in, fan-out or their mean (fans count ``prod(shape[2:])`` receptive positions).

    Args:
        rnd_type: ``uniform`` (in ``[-scale, scale]``) or ``gaussian`` (std ``scale``).
        factor_type: ``avg``, ``in`` or ``out``.
        magnitude: the numerator.
    """

    def __init__(self, rnd_type: str = "uniform", factor_type: str = "avg",
                 magnitude: float = 3) -> None:
        if rnd_type not in ("uniform", "gaussian"):
            raise PortableError(f"Xavier rnd_type must be 'uniform' or 'gaussian', got "
                                f"{rnd_type!r}")
        if factor_type not in ("avg", "in", "out"):
            raise PortableError(f"Xavier factor_type must be 'avg', 'in' or 'out', got "
                                f"{factor_type!r}")
        super().__init__(rnd_type=rnd_type, factor_type=factor_type, magnitude=magnitude)
        self.rnd_type, self.factor_type = rnd_type, factor_type
        self.magnitude = float(magnitude)

    def scale(self, shape: tuple[int, ...]) -> float:
        """The bound (uniform) or standard deviation (gaussian) for a weight of ``shape``."""
        if len(shape) < 2:
            raise ShapeError(f"{type(self).__name__} needs a weight of at least 2 dimensions, "
                             f"got shape {list(shape)}")
        receptive = float(np.prod(shape[2:])) if len(shape) > 2 else 1.0
        fan_in, fan_out = shape[1] * receptive, shape[0] * receptive
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[self.factor_type]
        return math.sqrt(self.magnitude / factor)

    def sample(self, shape):
        scale = self.scale(shape)
        if self.rnd_type == "uniform":
            return random.generator().uniform(-scale, scale, size=shape)
        return random.generator().normal(0.0, scale, size=shape)


@_register()
class MSRAPrelu(Xavier):
    """He/MSRA initialization for (P)ReLU nets: gaussian Xavier with magnitude
    ``2 / (1 + slope**2)``.

    Args:
        factor_type: ``avg``, ``in`` or ``out``.
        slope: the initial negative slope of the PReLUs.
    """

    def __init__(self, factor_type: str = "avg", slope: float = 0.25) -> None:
        super().__init__("gaussian", factor_type, 2.0 / (1 + slope ** 2))
        self._kwargs = {"factor_type": factor_type, "slope": slope}


def _bilinear(shape: tuple[int, ...]) -> np.ndarray:
    """The bilinear-upsampling kernel of a (out, in, h, w) deconvolution weight."""
    if len(shape) != 4:
        raise ShapeError(f"Bilinear needs a 4-d weight (out, in, h, w), got {list(shape)}")
    f = np.ceil(shape[3] / 2.0)
    c = (2 * f - 1 - f % 2) / (2.0 * f)
    x = np.arange(shape[3])
    y = np.arange(shape[2])
    kernel = np.outer(1 - np.abs(y / f - c), 1 - np.abs(x / f - c)).astype(np.float32)
    return np.broadcast_to(kernel, shape)


@_register()
class Bilinear(Initializer):
    """The bilinear-interpolation kernel, for upsampling (deconvolution) weights."""

    def sample(self, shape):
        return _bilinear(shape)


@_register()
class LSTMBias(Initializer):
    """Zeros, except ``forget_bias`` in the forget gate (the second of the 4 gate blocks)."""

    def __init__(self, forget_bias: float = 1.0) -> None:
        super().__init__(forget_bias=forget_bias)
        self.forget_bias = forget_bias

    def sample(self, shape):
        values = np.zeros(shape)
        hidden = shape[0] // 4
        values[hidden:2 * hidden] = self.forget_bias
        return values


class Load:
    """Initialize from saved arrays (a dict, or a file ``nd.load`` reads), dropping ``arg:`` /
    ``aux:`` prefixes; names not found use ``default_init``.

    Args:
        param: name -> array, or the path of an MXNet ``.params`` / ``nd.save`` file.
        default_init: the initializer of the names ``param`` lacks.
        verbose: log each parameter's source.
    """

    def __init__(self, param: Any, default_init: Any = None, verbose: bool = False) -> None:
        if isinstance(param, str):
            from portable.ndarray.mxnet_files import load  # the reader pulls in nd arrays

            param = load(param)
        if not isinstance(param, dict):
            raise PortableError(f"Load needs a dict of name -> array, got "
                                f"{type(param).__name__}")
        self.param = {(k[4:] if k.startswith(("arg:", "aux:")) else k): v
                      for k, v in param.items()}
        self.default_init = default_init
        self.verbose = verbose

    def __call__(self, name: str, array: Any) -> None:
        if name in self.param:
            value = self.param[name]
            value = value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)
            if tuple(value.shape) != tuple(array.shape):
                raise ShapeError(f"Load: parameter {name!r} has shape {list(array.shape)} but "
                                 f"the loaded array has {list(value.shape)}")
            array[:] = value.astype(array.dtype)
        elif self.default_init is None:
            raise PortableError(f"Load: {name!r} is not among the loaded parameters and no "
                                f"default_init was given")
        else:
            self.default_init(name, array)


class Mixed:
    """The first initializer whose regular expression matches the name (``re.match``).

    Args:
        patterns: regular expressions, e.g. ``[".*bias", ".*"]``.
        initializers: one per pattern.
    """

    def __init__(self, patterns: Sequence[str], initializers: Sequence[Any]) -> None:
        if len(patterns) != len(initializers):
            raise PortableError(f"Mixed: {len(patterns)} patterns for {len(initializers)} "
                                f"initializers")
        self.map = [(re.compile(p), init) for p, init in zip(patterns, initializers)]

    def __call__(self, name: str, array: Any) -> None:
        for pattern, init in self.map:
            if pattern.match(name):
                init(name, array)
                return
        raise PortableError(f"Mixed: parameter {name!r} matches no pattern; add '.*' last "
                            f"with a default initializer")


def create(spec: Any, **kwargs: Any) -> Initializer:
    """An initializer from an instance, a name (``"xavier"``, ``"zeros"``) or a ``dumps()``
    string.

    Example:
        >>> create('["xavier", {"magnitude": 2}]').magnitude
        2.0
    """
    if isinstance(spec, Initializer):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("["):
            try:
                name, args = json.loads(text)
            except (ValueError, TypeError):
                raise PortableError(f"cannot read initializer {spec!r}: expected "
                                    f"'[\"name\", {{arguments}}]'") from None
            return create(name, **args)
        cls = INITIALIZERS.get(text.lower())
        if cls is None:
            raise PortableError(f"unknown initializer {spec!r}; known: "
                                f"{', '.join(sorted(INITIALIZERS))}")
        return cls(**kwargs)
    raise PortableError(f"cannot make an initializer from {type(spec).__name__}")


__all__ = ["Bilinear", "Constant", "InitDesc", "Initializer", "LSTMBias", "Load", "MSRAPrelu",
           "Mixed", "Normal", "One", "Orthogonal", "Uniform", "Xavier", "Zero", "create"]
