"""ParameterDict (MXNet 1.x ``gluon.ParameterDict``): an ordered name -> Parameter mapping with
a name prefix, sharing, bulk initialisation and prefixed-name save/load (safetensors, or MXNet's
binary NDArray format, which loading recognises by its magic).

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
from portable.io import mxnet_ndarray_format as mxnet_format
from portable.io.tensors import TENSOR_FORMAT, load_tensors, read_tensor_file, write_tensor_file

# The header of a parameters file names its writer; loading accepts any safetensors file but
# portable's other kinds (optimizer states, deployment files), which hold no parameters.
PARAMETERS_FORMAT = "portable.gluon.parameters"
PARAMETERS_METADATA = {"format": PARAMETERS_FORMAT}


def save_parameter_file(path: str, arrays: dict[str, np.ndarray],
                        format: str = "safetensors") -> None:
    """Write parameter values (atomically) as every Gluon saver does: safetensors by default,
    or MXNet's binary NDArray format (``format="mxnet"``: what MXNet 1.x itself reads).

    Args:
        path: the target file.
        arrays: name -> host array (a 0-d array is stored with shape (1,), as it always was).
        format: ``"safetensors"`` or ``"mxnet"``.

    Example:
        >>> save_parameter_file("net.params", {"0.weight": np.ones((2, 3))})  # doctest: +SKIP
    """
    if format == "mxnet":
        # MXNet 1.x cannot read back a 0-d array it writes: store it as (1,), as safetensors does
        mxnet_format.write(path, {name: np.reshape(value, (1,)) if np.ndim(value) == 0 else value
                                  for name, value in arrays.items()})
        return
    if format != "safetensors":
        raise PortableError(f"unknown parameter file format {format!r}; use 'safetensors' or "
                            f"'mxnet'")
    write_tensor_file(path, {name: np.ascontiguousarray(value) for name, value in arrays.items()},
                      PARAMETERS_METADATA)


def _load_mxnet_file(path: str) -> dict[str, np.ndarray]:
    loaded: dict[str, np.ndarray] = {}
    for index, (name, value) in enumerate(mxnet_format.read(path)):
        if name is None:
            raise SerializationError(f"parameter file {path} is an MXNet NDArray file holding "
                                     f"an unnamed list of arrays: parameters need names")
        if name in loaded:
            raise SerializationError(f"parameter file {path} holds {name!r} twice (again as "
                                     f"array {index})")
        loaded[name] = value
    return loaded


def load_parameter_file(path: str) -> dict[str, np.ndarray]:
    """Name -> writable array of a parameter file: safetensors, or MXNet's binary NDArray
    format (recognised by its magic: ``mx.nd.save``, MXNet's ``save_parameters``, ``export``,
    ``save_checkpoint`` and model-zoo files). SerializationError naming the file if bad.

    Any safetensors file is read (another library's too), except one of portable's that holds
    no parameters (its header's ``format`` names another kind, such as a deployment file); a
    checkpoint's parameters file (a verified tensor file) has its digest checked as well.

    Example:
        >>> load_parameter_file("net.params")["0.weight"].shape            # doctest: +SKIP
        (2, 3)
    """
    if mxnet_format.is_mxnet_ndarray_file(path):
        return _load_mxnet_file(path)
    found = read_tensor_file(path, what="parameter file")  # mapped: nothing copied yet
    kind = found.metadata.get("format")
    if kind == TENSOR_FORMAT:
        return load_tensors(path)[0]
    if kind is not None and kind.startswith("portable.") and kind != PARAMETERS_FORMAT:
        raise SerializationError(f"parameter file {path}: its header says it is a {kind!r} "
                                 f"file, which holds no parameters")
    return {name: np.array(array) for name, array in found.tensors.items()}


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

    def save(self, filename: str, strip_prefix: str = "", format: str = "safetensors") -> None:
        """Save every parameter under its name (minus ``strip_prefix``), as safetensors or,
        with ``format="mxnet"``, in MXNet's binary NDArray format."""
        arrays = {}
        for param in self.values():
            if strip_prefix and not param.name.startswith(strip_prefix):
                raise PortableError(f"prefix {strip_prefix!r} is to be stripped before saving, "
                                    f"but Parameter {param.name!r} does not start with it")
            arrays[param.name[len(strip_prefix):]] = param._reduce()
        save_parameter_file(filename, arrays, format)

    def load(self, filename: str, device: Any = None, allow_missing: bool = False,
             ignore_extra: bool = False, restore_prefix: str = "", cast_dtype: bool = False,
             dtype_source: str = "current", ctx: Any = None) -> None:
        """Load parameters saved by :meth:`save` (or ``HybridBlock.export``: ``arg:``/``aux:``
        prefixes are dropped), adding ``restore_prefix`` to the saved names."""
        device = device if device is not None else ctx
        loaded: dict[str, np.ndarray] = {}
        for key, value in load_parameter_file(filename).items():
            name = restore_prefix + (key[4:] if key.startswith(("arg:", "aux:")) else key)
            if name in loaded:  # "arg:w" and "aux:w" (or "w"): which one is meant?
                raise SerializationError(f"file {filename} holds parameter {name!r} twice "
                                         f"(as {key!r} and under another of the names 'w', "
                                         f"'arg:w', 'aux:w')")
            loaded[name] = value
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
    chosen = [(name, params[name], value) for name, value in loaded.items() if name in params]
    for name, param, value in chosen:  # all checked before any is set: no half-loaded model
        check_loadable(param, value, filename, cast_dtype, dtype_source, name)
    for _, param, value in chosen:
        param._load_init(value, device, cast_dtype, dtype_source, source=filename)


def spread_shared(params: dict[str, Parameter], loaded: dict[str, np.ndarray],
                  filename: str) -> None:
    """Give every name of a shared parameter (one Parameter under several names) the value
    saved under any of them (``save_parameters(deduplicate=True)`` saves it once), in place.

    Raises:
        SerializationError: the file holds different values under two names of one parameter.
    """
    names_of: dict[int, list[str]] = {}
    for name, param in params.items():
        names_of.setdefault(id(param), []).append(name)
    for names in names_of.values():
        present = [n for n in names if n in loaded]
        if not present:
            continue
        first = loaded[present[0]]
        for other in present[1:]:  # one parameter cannot take two values
            if not (loaded[other].shape == first.shape
                    and np.array_equal(loaded[other], first, equal_nan=True)):
                raise SerializationError(f"file {filename} holds different values under "
                                         f"{present[0]!r} and {other!r}, which name one "
                                         f"shared parameter")
        for name in names:
            loaded.setdefault(name, first)


def check_loadable(param: Parameter, value: np.ndarray, filename: str, cast_dtype: bool,
                   dtype_source: str, name: str | None = None) -> None:
    """Refuse ``value`` for ``param`` when its shape or dtype does not fit (as
    ``Parameter._load_init`` would, and also a cast that changes the kind of number).

    Args:
        name: the name the file stores the value under, when not the parameter's own.

    Raises:
        SerializationError: naming the file and the parameter.
    """
    label = repr(param.name) if name in (None, param.name) else f"{name!r} ({param.name})"
    where = f"cannot load Parameter {label} from {filename}"
    shape = param.shape
    if shape is not None and (len(shape) != value.ndim or any(
            d not in (0, -1, s) for d, s in zip(shape, value.shape))):
        raise SerializationError(f"{where}: the file has shape {value.shape}, the parameter "
                                 f"{shape}")
    dtype = np.dtype(param.dtype)
    if value.dtype == dtype or (cast_dtype and dtype_source == "saved"):
        return
    if not cast_dtype:
        raise SerializationError(f"{where}: the file has dtype {value.dtype}, the parameter "
                                 f"{dtype}; pass cast_dtype=True to convert")
    if not np.can_cast(value.dtype, dtype, "same_kind"):
        # a cast that would drop imaginary parts or fractions, not only precision
        raise SerializationError(f"{where}: the file's dtype {value.dtype} does not convert "
                                 f"to the parameter's {dtype} without changing its kind")
