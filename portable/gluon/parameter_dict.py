"""ParameterDict (MXNet 1.x ``gluon.ParameterDict``): an ordered name -> Parameter mapping with
a name prefix, sharing, bulk initialisation and prefixed-name save/load (safetensors).

Example:
    >>> params = ParameterDict("net_")
    >>> params.get("weight", shape=(2, 2)).name
    'net_weight'
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any, Iterator

import numpy as np

from portable import initializer as _init
from portable.device import Device
from portable.errors import PortableError, SerializationError
from portable.gluon.parameter import Constant, Parameter, create_initializer
from portable.io.tensors import read_tensor_file, write_tensor_file

# The header of a parameters file names its writer; loading accepts any safetensors file.
PARAMETERS_METADATA = {"format": "portable.gluon.parameters"}


def save_parameter_file(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write parameter values as a safetensors file (atomically), as every Gluon saver does.

    Args:
        path: the target file.
        arrays: name -> host array (a 0-d array is stored with shape (1,), as it always was).

    Example:
        >>> save_parameter_file("net.params", {"0.weight": np.ones((2, 3))})  # doctest: +SKIP
    """
    write_tensor_file(path, {name: np.ascontiguousarray(value) for name, value in arrays.items()},
                      PARAMETERS_METADATA)


def load_parameter_file(path: str) -> dict[str, np.ndarray]:
    """Name -> writable array of any safetensors file (SerializationError naming it if bad).

    Example:
        >>> load_parameter_file("net.params")["0.weight"].shape            # doctest: +SKIP
        (2, 3)
    """
    return read_tensor_file(path, writable=True, what="parameter file").tensors


class ParameterDict:
    """An ordered name -> Parameter mapping with a name prefix, optionally sharing parameters
    with another dict (MXNet 1.x ``gluon.ParameterDict``).

    Example:
        >>> params = ParameterDict("net_")
        >>> params.get("weight", shape=(2, 2)).name
        'net_weight'
    """

    def __init__(self, prefix: str = "", shared: "ParameterDict | None" = None) -> None:
        self._prefix = prefix
        self._params: OrderedDict[str, Parameter] = OrderedDict()
        self._shared = shared

    def __repr__(self) -> str:
        body = "\n".join(f"  {p!r}" for p in self.values())
        return f"{self._prefix or 'ParameterDict'} (\n{body}\n)"

    @property
    def prefix(self) -> str:
        return self._prefix

    def __getitem__(self, key: str) -> Parameter:
        return self._params[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)

    def __contains__(self, key: object) -> bool:
        return key in self._params

    def keys(self):
        return self._params.keys()

    def values(self):
        return self._params.values()

    def items(self):
        return self._params.items()

    def _get_impl(self, name: str) -> Parameter | None:
        if name in self._params:
            return self._params[name]
        if self._shared is not None and name in self._shared._params:
            self._params[name] = self._shared._params[name]
            return self._params[name]
        return None

    def get(self, name: str, **kwargs: Any) -> Parameter:
        """The parameter ``prefix + name``, created with ``kwargs`` if it does not exist; an
        existing one must agree with ``kwargs`` (0 dimensions of a shape match anything)."""
        full = self._prefix + name
        param = self._get_impl(full)
        if param is None:
            param = Parameter(full, **kwargs)
            self._params[full] = param
            return param
        for key, value in kwargs.items():
            current = getattr(param, key, None)
            if value is None or current is None:
                if value is not None:
                    setattr(param, key, value)
                continue
            if key == "shape":
                merged = _merge_shapes(tuple(value), current)
                if merged is not None:
                    param._shape = merged
                    continue
            elif key == "dtype" and np.dtype(value) == current:
                continue
            elif key == "init" or current == value:
                continue
            raise PortableError(f"cannot retrieve Parameter {full!r}: attribute {key!r} is "
                                f"{current!r}, asked for {value!r}")
        return param

    def get_constant(self, name: str, value: Any = None) -> Constant:
        """The constant ``prefix + name`` (created from ``value`` if it does not exist)."""
        full = self._prefix + name
        param = self._get_impl(full)
        if param is None:
            if value is None:
                raise PortableError(f"no constant {full!r} exists and no value was given")
            param = self._params[full] = Constant(full, value)
        elif not isinstance(param, Constant):
            raise PortableError(f"parameter {full!r} exists but is not a Constant")
        return param

    def update(self, other: "ParameterDict | dict") -> None:
        """Add the parameters of ``other``; a different parameter under the same name raises."""
        for key, value in other.items():
            if key in self._params and self._params[key] is not value:
                raise PortableError(f"cannot update ParameterDict: a different Parameter "
                                    f"named {key!r} already exists")
            self._params[key] = value

    def initialize(self, init: Any = None, device: Any = None, verbose: bool = False,
                   force_reinit: bool = False, ctx: Any = None) -> None:
        """Initialise every parameter (``init`` applies by name, default ``Uniform()``)."""
        default = create_initializer(init) or _init.Uniform()
        for param in self.values():
            param.initialize(None, device if device is not None else ctx, default,
                             force_reinit=force_reinit)

    def zero_grad(self) -> None:
        for param in self.values():
            param.zero_grad()

    def reset_device(self, device: Any) -> None:
        for param in self.values():
            param.reset_device(device)

    reset_ctx = reset_device

    def list_device(self) -> list[Device]:
        devices: list[Device] = []
        for param in self.values():
            devices.extend(d for d in param.list_device() if d not in devices)
        return devices

    list_ctx = list_device

    def setattr(self, name: str, value: Any) -> None:
        """Set an attribute (``grad_req``, ``lr_mult``...) on every parameter."""
        for param in self.values():
            setattr(param, name, value)

    def select(self, pattern: str) -> "ParameterDict":
        """The parameters whose names match the regular expression ``pattern``."""
        regex = re.compile(pattern)
        selected = ParameterDict(self._prefix)
        selected.update({k: v for k, v in self.items() if regex.match(k)})
        return selected

    def save(self, filename: str, strip_prefix: str = "") -> None:
        """Save every parameter under its name (minus ``strip_prefix``), as safetensors."""
        arrays = {}
        for param in self.values():
            if strip_prefix and not param.name.startswith(strip_prefix):
                raise PortableError(f"prefix {strip_prefix!r} is to be stripped before saving, "
                                    f"but Parameter {param.name!r} does not start with it")
            arrays[param.name[len(strip_prefix):]] = param._reduce()
        save_parameter_file(filename, arrays)

    def load(self, filename: str, device: Any = None, allow_missing: bool = False,
             ignore_extra: bool = False, restore_prefix: str = "", cast_dtype: bool = False,
             dtype_source: str = "current", ctx: Any = None) -> None:
        """Load parameters saved by :meth:`save` (or ``HybridBlock.export``: ``arg:``/``aux:``
        prefixes are dropped), adding ``restore_prefix`` to the saved names."""
        device = device if device is not None else ctx
        loaded = {restore_prefix + (k[4:] if k.startswith(("arg:", "aux:")) else k): v
                  for k, v in load_parameter_file(filename).items()}
        load_into(dict(self.items()), loaded, filename, device, allow_missing, ignore_extra,
                  cast_dtype, dtype_source)


def _merge_shapes(wanted: tuple, current: tuple) -> tuple | None:
    if len(wanted) != len(current):
        return None
    merged = []
    for a, b in zip(wanted, current):
        if a > 0 and b > 0 and a != b:
            return None
        merged.append(a if a > 0 else b)
    return tuple(merged)


def load_into(params: dict[str, Parameter], loaded: dict[str, np.ndarray], filename: str,
              device: Any, allow_missing: bool, ignore_extra: bool, cast_dtype: bool = False,
              dtype_source: str = "current") -> None:
    """Set ``params`` from ``loaded`` (both keyed by the same names), checking that nothing is
    missing or extra unless allowed; errors name the file and the parameter."""
    if not allow_missing:
        missing = [name for name in params if name not in loaded]
        if missing:
            raise SerializationError(
                f"parameter(s) {missing} are missing in file {filename}, which contains "
                f"{sorted(loaded)}; pass allow_missing=True to keep their current values")
    if not ignore_extra:
        extra = [name for name in loaded if name not in params]
        if extra:
            raise SerializationError(
                f"file {filename} contains parameter(s) {extra} that the model does not have "
                f"(it has {sorted(params)}); pass ignore_extra=True to skip them")
    for name, value in loaded.items():
        if name in params:
            params[name]._load_init(value, device, cast_dtype, dtype_source, source=filename)
