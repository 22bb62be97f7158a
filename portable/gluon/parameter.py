"""Parameters (MXNet 1.x ``gluon.Parameter``): data, gradient and deferred initialisation.

A Parameter owns one NDArray per device (the same values on each) and, unless its ``grad_req``
is ``"null"``, a gradient buffer attached with autograd. Its shape may be partly unknown
(``0`` entries, e.g. a Dense layer's ``in_units``): ``initialize`` then only records how to
initialise, and the first forward pass infers the shape and finishes the job (deferred
initialisation).

Initialisation follows MXNet: an initializer given to the parameter itself (``init=``, e.g. a
layer's ``bias_initializer='zeros'``) is applied as is; otherwise the initializer passed to
``Block.initialize`` applies by name (``*bias``/``*beta``/``*running_mean`` zeros,
``*gamma``/``*running_var`` ones, anything else sampled). The default is ``Uniform(0.07)``.

Example:
    >>> import portable as pt
    >>> w = Parameter("fc_weight", shape=(2, 3))
    >>> w.initialize(pt.init.One())
    >>> float(w.data().asnumpy().sum())
    6.0
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from portable import initializer as _init
from portable.device import Device, as_device
from portable.errors import PortableError, SerializationError, ShapeError
from portable.gluon.utils import as_device_list
from portable.numpy.mode import is_np_array
from portable.numpy.multiarray import as_np

GRAD_REQS = ("write", "add", "null")


class DeferredInitializationError(PortableError):
    """A parameter's data was asked for before the first forward pass inferred its shape."""


_INITIALIZERS = {"zeros": _init.Zero, "zero": _init.Zero, "ones": _init.One, "one": _init.One,
                 "xavier": _init.Xavier, "uniform": _init.Uniform, "normal": _init.Normal}


def create_initializer(spec: Any) -> "_init.Initializer | None":
    """An Initializer from an instance, a class, a name (``'zeros'``, ``'xavier'``...) or None.

    Example:
        >>> type(create_initializer("zeros")).__name__
        'Zero'
    """
    if spec is None or isinstance(spec, _init.Initializer):
        return spec
    if isinstance(spec, type) and issubclass(spec, _init.Initializer):
        return spec()
    if isinstance(spec, str):
        try:
            return _INITIALIZERS[spec.lower()]()
        except KeyError:
            raise PortableError(f"unknown initializer {spec!r}; known names: "
                                f"{sorted(_INITIALIZERS)}") from None
    raise PortableError(f"cannot use {spec!r} as an initializer; give a portable.init "
                        f"Initializer or one of {sorted(_INITIALIZERS)}")


def _known(shape: tuple | None) -> bool:
    return shape is not None and all(int(d) > 0 for d in shape)


def _fill(name: str, shape: tuple, dtype: np.dtype, explicit: Any, default: Any) -> np.ndarray:
    host = np.zeros(shape, dtype=dtype)
    if explicit is not None:
        try:
            host[...] = explicit.sample(tuple(shape))  # applied as is, whatever the name
        except NotImplementedError:  # an initializer that only implements __call__
            explicit(name, host)
    else:
        default(name, host)  # MXNet's rules by name suffix
    return host


class Parameter:
    """A learnable (or state) tensor of a Block.

    Args:
        name: the full name (``dense0_weight``).
        grad_req: ``"write"``, ``"add"`` or ``"null"`` (no gradient).
        shape: the shape; ``0`` entries (or None) are inferred on the first forward pass.
        dtype: the element type.
        lr_mult, wd_mult: multipliers of the learning rate and weight decay for optimizers.
        init: this parameter's own initializer (instance or name), used in preference to the
            one given to ``initialize``.
        allow_deferred_init: allow ``initialize`` before the shape is known.
        differentiable: False forces ``grad_req="null"``.

    Example:
        >>> p = Parameter("w", shape=(3, 0), allow_deferred_init=True)
        >>> p.shape = (3, 4); p.shape
        (3, 4)
    """

    def __init__(self, name: str, grad_req: str = "write", shape: Any = None,
                 dtype: Any = "float32", lr_mult: float = 1.0, wd_mult: float = 1.0,
                 init: Any = None, allow_deferred_init: bool = False,
                 differentiable: bool = True, stype: str = "default",
                 grad_stype: str = "default") -> None:
        if stype != "default" or grad_stype != "default":
            raise PortableError(f"Parameter {name!r}: sparse storage types are not supported")
        self._name = name
        self._shape = None if shape is None else (
            (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape))
        self._dtype = np.dtype(dtype)
        self.lr_mult = lr_mult
        self.wd_mult = wd_mult
        self.init = init
        self._allow_deferred_init = allow_deferred_init
        self._differentiable = differentiable
        if grad_req not in GRAD_REQS:
            raise PortableError(f"Parameter {name!r}: grad_req must be one of {GRAD_REQS}, "
                                f"got {grad_req!r}")
        self._grad_req = grad_req if differentiable else "null"
        self._data: list | None = None
        self._grad: list | None = None
        self._devices: list[Device] = []
        self._deferred_init: tuple = ()
        self._var = None

    def __repr__(self) -> str:
        return f"Parameter {self.name} (shape={self.shape}, dtype={self.dtype.name})"

    # -- attributes ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @dtype.setter
    def dtype(self, value: Any) -> None:
        self.cast(value)

    @property
    def shape(self) -> tuple[int, ...] | None:
        return self._shape

    @shape.setter
    def shape(self, new_shape: Any) -> None:
        new_shape = tuple(int(d) for d in new_shape)
        if self._shape is not None and (len(self._shape) != len(new_shape) or any(
                old not in (0, -1, new) for old, new in zip(self._shape, new_shape))):
            raise ShapeError(f"Parameter {self.name!r}: shape {new_shape} is incompatible with "
                             f"its declared shape {self._shape} (0 marks an unknown dimension)")
        if new_shape != self._shape:
            self._var = None
        self._shape = new_shape

    @property
    def grad_req(self) -> str:
        return self._grad_req

    @grad_req.setter
    def grad_req(self, req: str) -> None:
        if req not in GRAD_REQS:
            raise PortableError(f"Parameter {self.name!r}: grad_req must be one of {GRAD_REQS}, "
                                f"got {req!r}")
        if not self._differentiable:
            req = "null"
        if req == self._grad_req:
            return
        self._grad_req = req
        if self._data is not None:
            if req == "null":
                self._data = [d.detach() for d in self._data]
            self._init_grad()

    # -- initialisation --------------------------------------------------------------------
    def initialize(self, init: Any = None, device: Any = None, default_init: Any = None,
                   force_reinit: bool = False, ctx: Any = None) -> None:
        """Create the data on ``device`` (a Device or a list of them; default the CPU).

        Args:
            init: an initializer applied as is (default: the parameter's own ``init``, else
                ``default_init`` applied by name).
            device, ctx: where the data lives (``ctx`` is the MXNet 1.x spelling).
            default_init: the initializer applied by name (default ``Uniform()``).
            force_reinit: re-initialise data that already exists.
        """
        if self._data is not None and not force_reinit:
            warnings.warn(f"Parameter {self.name!r} is already initialized, ignoring. Set "
                          f"force_reinit=True to re-initialize.", stacklevel=2)
            return
        self._data = self._grad = None
        devices = as_device_list(device if device is not None else ctx)
        explicit = create_initializer(init if init is not None else self.init)
        default = create_initializer(default_init) or _init.Uniform()
        self._deferred_init = (explicit, devices, default, None)
        if not _known(self._shape):
            if self._allow_deferred_init:
                return
            raise ShapeError(f"cannot initialize Parameter {self.name!r}: its shape "
                             f"{self._shape} is not fully known and deferred initialization "
                             f"is not allowed for it")
        self._finish_deferred_init()

    def _finish_deferred_init(self) -> None:
        if not self._deferred_init:
            return
        explicit, devices, default, data = self._deferred_init
        if not _known(self._shape):
            raise DeferredInitializationError(
                f"Parameter {self.name!r} has unknown shape {self._shape}; pass one batch of "
                f"data through the network (or give the layer its input size) first")
        self._deferred_init = ()
        if data is None:
            data = _fill(self.name, self._shape, self._dtype, explicit, default)
        self._init_impl(np.asarray(data, dtype=self._dtype), devices)

    def _init_impl(self, host: np.ndarray, devices: list[Device]) -> None:
        from portable.ndarray import array

        self._devices = list(devices)
        self._data = [array(host, device=d, dtype=self._dtype) for d in self._devices]
        self._init_grad()

    def _init_grad(self) -> None:
        if self._grad_req == "null" or self._data is None:
            self._grad = None
            return
        for data in self._data:
            data.attach_grad(self._grad_req)
        self._grad = [data.grad for data in self._data]

    def _set_grad_storage(self, grads: list) -> None:
        """Use ``grads`` (zero arrays of this parameter's shape, one per device) as its
        gradient buffers: the Trainer lays gradients back to back for a distributed store."""
        for data, grad in zip(self._data, grads):
            data._grad = grad
        self._grad = list(grads)

    @property
    def is_initialized(self) -> bool:
        return self._data is not None

    # -- data access -----------------------------------------------------------------------
    def _select(self, arrays: list | None, device: Any, what: str) -> Any:
        if arrays is not None:
            if device is None:
                return arrays[0]
            device = as_device(device)
            for d, a in zip(self._devices, arrays):
                if d == device:
                    return a
            raise PortableError(f"Parameter {self.name!r} was not initialized on {device}; it "
                                f"lives on {[str(d) for d in self._devices]}")
        self._raise_uninitialized(what)

    def _raise_uninitialized(self, what: str = "data") -> None:
        if self._deferred_init:
            raise DeferredInitializationError(
                f"Parameter {self.name!r} has not been initialized yet because initialization "
                f"was deferred (shape {self._shape}); it happens during the first forward "
                f"pass. Pass one batch of data through the network before accessing its {what}.")
        raise PortableError(f"Parameter {self.name!r} has not been initialized. Call "
                            f"initialize() on it or on the Block (use Block.collect_params(), "
                            f"which includes nested child blocks, rather than Block.params)")

    def data(self, device: Any = None, ctx: Any = None) -> Any:
        """The NDArray on ``device`` (default: the first device it lives on)."""
        data = self._select(self._data, device if device is not None else ctx, "data")
        return as_np(data) if is_np_array() else data  # (mx.np arrays in NumPy mode)

    def list_data(self) -> list:
        """The NDArrays on every device, in the order of ``list_device()``."""
        if self._data is None:
            self._raise_uninitialized()
        return list(self._data)

    def grad(self, device: Any = None, ctx: Any = None) -> Any:
        """The gradient NDArray on ``device``."""
        if self._data is not None and self._grad is None:
            raise PortableError(f"cannot get the gradient of Parameter {self.name!r}: its "
                                f"grad_req is 'null'")
        grad = self._select(self._grad, device if device is not None else ctx, "gradient")
        return as_np(grad) if is_np_array() else grad

    def list_grad(self) -> list:
        if self._data is not None and self._grad is None:
            raise PortableError(f"cannot get the gradient of Parameter {self.name!r}: its "
                                f"grad_req is 'null'")
        if self._grad is None:
            self._raise_uninitialized("gradient")
        return list(self._grad)

    def list_device(self) -> list[Device]:
        if self._data is None:
            if self._deferred_init:
                return list(self._deferred_init[1])
            self._raise_uninitialized()
        return list(self._devices)

    list_ctx = list_device

    def set_data(self, data: Any) -> None:
        """Copy ``data`` into the parameter on every device (before deferred initialisation
        finishes, it becomes the initial value)."""
        host = data.asnumpy() if hasattr(data, "asnumpy") else np.asarray(data)
        self.shape = host.shape
        if self._data is None:
            if not self._deferred_init:
                self._raise_uninitialized()
            self._deferred_init = self._deferred_init[:3] + (host,)
            return
        for array in self._data:
            array[:] = host.astype(self._dtype, copy=False)

    def zero_grad(self) -> None:
        """Set the gradient buffers to zero (for ``grad_req='add'``)."""
        for grad in self._grad or ():
            grad[:] = 0

    def reset_device(self, device: Any) -> None:
        """Move the data to ``device`` (a Device or a list)."""
        devices = as_device_list(device)
        if self._data is not None:
            host = self._reduce()
            self._init_impl(host, devices)
        elif self._deferred_init:
            self._deferred_init = (self._deferred_init[0], devices) + self._deferred_init[2:]
        else:
            self._raise_uninitialized()

    reset_ctx = reset_device

    def cast(self, dtype: Any) -> None:
        """Change the element type (the data and gradients are converted)."""
        dtype = np.dtype(dtype)
        if dtype == self._dtype:
            return
        self._dtype = dtype
        self._var = None
        if self._data is not None:
            self._init_impl(self._reduce().astype(dtype), self._devices)
        elif self._deferred_init and self._deferred_init[3] is not None:
            self._deferred_init = self._deferred_init[:3] + (
                np.asarray(self._deferred_init[3]).astype(dtype),)

    def _reduce(self) -> np.ndarray:
        """The value on the host (the mean over devices, as MXNet saves it)."""
        arrays = self.list_data()
        host = arrays[0].asnumpy()
        if len(arrays) > 1:
            host = sum((a.asnumpy() for a in arrays[1:]), host) / len(arrays)
        return host.astype(self._dtype, copy=False)

    def _load_init(self, data: np.ndarray, device: Any = None, cast_dtype: bool = False,
                   dtype_source: str = "current", source: str = "") -> None:
        """Set the value from a loaded array, checking shape and dtype against the parameter."""
        where = f" from {source}" if source else ""
        if self._shape is not None and (len(self._shape) != data.ndim or any(
                d not in (0, -1, s) for d, s in zip(self._shape, data.shape))):
            raise SerializationError(f"cannot load Parameter {self.name!r}{where}: the file "
                                     f"has shape {data.shape}, the parameter {self._shape}")
        if data.dtype != self._dtype:
            if not cast_dtype:
                raise SerializationError(
                    f"cannot load Parameter {self.name!r}{where}: the file has dtype "
                    f"{data.dtype}, the parameter {self._dtype}; pass cast_dtype=True to "
                    f"convert")
            if dtype_source == "saved":
                self.cast(data.dtype)
            else:
                data = data.astype(self._dtype)
        self.shape = data.shape
        if self._data is None:
            if device is not None:
                devices = as_device_list(device)
            elif self._deferred_init:
                devices = self._deferred_init[1]
            else:
                devices = as_device_list(None)
            self._deferred_init = ()
            self._init_impl(data, devices)
        else:
            if device is not None and as_device_list(device) != self._devices:
                self._init_impl(data, as_device_list(device))
            else:
                self.set_data(data)

    # -- symbolic view ---------------------------------------------------------------------
    def var(self) -> Any:
        """This parameter as a Symbol variable (shape and dtype declared when known)."""
        if self._var is None:
            from portable import symbol as sym

            shape = self._shape if _known(self._shape) else None
            self._var = sym.var(self.name, shape=shape, dtype=self._dtype,
                                lr_mult=self.lr_mult, wd_mult=self.wd_mult)
        return self._var


class Constant(Parameter):
    """A parameter that holds a constant (``grad_req='null'``), MXNet's ``gluon.Constant``.

    Example:
        >>> c = Constant("c", [1.0, 2.0]); c.initialize(); c.data().asnumpy().tolist()
        [1.0, 2.0]
    """

    def __init__(self, name: str, value: Any) -> None:
        value = np.asarray(value.asnumpy() if hasattr(value, "asnumpy") else value)
        if value.dtype.kind == "f" and value.dtype != np.float64:
            value = value.astype(np.float32)
        self.value = value
        super().__init__(name, grad_req="null", shape=value.shape, dtype=value.dtype,
                         init=_ValueInit(value), differentiable=False)


class _ValueInit(_init.Initializer):
    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def sample(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.broadcast_to(self.value, shape)
