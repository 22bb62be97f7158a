"""A NumPy array namespace that refuses what CuPy lacks, so shared kernels stay portable.

The shared kernels (``backends/xp/kernels``) are written over ``ctx.xp`` so that the CuPy
backend can run them with ``xp = cupy``. Nothing on a CPU-only machine would notice a kernel
drifting into NumPy-only code; this namespace does. It computes with NumPy (so results can be
compared with the NumPy backend's), but its arrays are ``StrictArray`` wrappers, not ndarrays,
and it records (and raises on) every use of a feature that CuPy does not have or that would
silently pull device data to the host:

- ``np.<function>(device_array)``: NumPy functions reached through ``__array_function__``,
  ``__array_ufunc__`` or ``__array__`` instead of ``xp.<function>`` (CuPy raises on implicit
  conversion to a host array);
- names of the NumPy namespace CuPy lacks (``NUMPY_ONLY``: ``errstate``, ``insert``,
  ``object_``...), NumPy-only submodule names, and ufunc methods CuPy does not provide
  (``UFUNC_METHODS``);
- object and string dtypes (CuPy arrays hold numbers only);
- host NumPy arrays (other than 0-d) mixed into a device operation (CuPy's ufuncs and
  routines refuse them; ``xp.asarray`` is the explicit copy in);
- ``.tolist()``, ``.item()`` and iteration on arrays above ``SMALL`` elements (each is a
  device-to-host copy, or a launch per element, on a GPU).

Every refusal is appended to ``RECORDER.violations`` before it is raised, so a kernel that
catches the exception and falls back to something else is still seen.

The snapshots below were taken from CuPy 14.2 against NumPy 2.4 (``dir(numpy)`` minus
``dir(cupy)``); ``tests/backends/test_xp_namespace.py`` re-checks them when CuPy is installed.
"""
from __future__ import annotations

import operator
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backends.cupy.overrides import cuda_kernels
from backends.xp.kernels import kernels
from portable.backend import Backend
from portable.device import Device
from portable.dtypes import is_low_precision

SMALL = 64  # elements: .tolist(), .item() and iteration are allowed up to this size

# numpy names that cupy does not have (top level), from dir(numpy) - dir(cupy)
NUMPY_ONLY = frozenset("""
False_ ScalarType True_ asmatrix block bmat busday_count busday_offset busdaycalendar bytes_
char character clongdouble complex256 core ctypeslib datetime64 datetime_as_string
datetime_data dtypes einsum_path emath errstate f2py flexible float128 frompyfunc fromregex
geomspace get_include getbufsize geterr geterrcall histogram_bin_edges info insert is_busday
isnat little_endian longdouble ma matrix matvec memmap nanpercentile nanquantile ndenumerate
nditer nested_iters object_ polyder polydiv polyint rec recarray record sctypeDict setbufsize
seterr seterrcall show_runtime spacing str_ strings test timedelta64 typecodes unstack vecdot
vecmat void
""".split())

# submodules the kernels may use, and the names in them that cupy lacks
SUBMODULES: dict[str, frozenset] = {
    "linalg": frozenset("diagonal matrix_norm multi_dot outer svdvals tensordot test trace "
                        "vecdot vector_norm".split()),
    "fft": frozenset({"test"}),
    "random": frozenset("MT19937 PCG64 PCG64DXSM Philox SFC64 SeedSequence bit_generator "
                        "get_bit_generator get_state mtrand set_bit_generator set_state "
                        "test".split()),
    "lib": frozenset("Arrayterator NumpyVersion add_docstring add_newdoc array_utils format "
                     "introspect mixins npyio scimath test tracemalloc_domain".split()),
    "lib.stride_tricks": frozenset(),
}

# ndarray attributes cupy.ndarray lacks
ARRAY_ONLY = frozenset({"ctypes", "getfield", "resize", "setfield", "setflags", "to_device"})

# ufunc methods CuPy provides, per ufunc (the methods exist on every cupy.ufunc object but
# raise for ufuncs without a scatter or reduction implementation). Deliberately narrow.
UFUNC_METHODS: dict[str, frozenset] = {
    "at": frozenset({"add", "subtract", "maximum", "minimum", "bitwise_and", "bitwise_or",
                     "bitwise_xor"}),
    "reduce": frozenset({"add", "multiply", "maximum", "minimum", "logical_and",
                         "logical_or"}),
    "accumulate": frozenset({"add", "multiply", "maximum", "minimum"}),
    "reduceat": frozenset({"add"}),
    "outer": frozenset(),
}

# xp functions that copy host data in (the explicit, allowed way in)
CONVERTERS = frozenset({"asarray", "array", "asanyarray"})


class NumpyOnlyFeature(TypeError):
    """A kernel used a feature the CuPy backend cannot run."""


@dataclass
class Violation:
    feature: str
    where: str  # the innermost frame in backends/ or portable/ (file:line function)

    def __str__(self) -> str:
        return f"{self.feature} at {self.where}"


@dataclass
class Recorder:
    """Every refusal since the last ``reset``."""

    violations: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reset(self) -> None:
        with self.lock:
            self.violations.clear()

    def refuse(self, feature: str) -> NumpyOnlyFeature:
        where = "?"
        for frame in reversed(traceback.extract_stack()[:-1]):
            if "strict_xp" not in frame.filename and ("/backends/" in frame.filename
                                                       or "/portable/" in frame.filename):
                where = f"{frame.filename.split('/work/main/')[-1]}:{frame.lineno} {frame.name}"
                break
        with self.lock:
            self.violations.append(Violation(feature, where))
        return NumpyOnlyFeature(f"not available on CUDA (CuPy): {feature} [{where}]")


RECORDER = Recorder()


# -- wrapping ------------------------------------------------------------------------------------
def _check_dtype(dtype: Any, what: str) -> None:
    if dtype is None:
        return
    try:
        kind = np.dtype(dtype).kind
    except TypeError:
        return
    if kind in "OUSVMm" or is_low_precision(dtype):
        raise RECORDER.refuse(f"{dtype_refusal(np.dtype(dtype))} in {what}")


def dtype_refusal(dtype: np.dtype) -> str:
    """How a refusal names a dtype CuPy cannot hold (``UNSUPPORTED_DTYPES`` keys)."""
    return f"dtype {'string' if dtype.kind in 'OUS' else dtype.name}"


def wrap(value: Any) -> Any:
    """NumPy results as the namespace's arrays (scalars as 0-d arrays, as CuPy returns)."""
    if isinstance(value, np.ndarray):
        _check_dtype(value.dtype, "an array")
        return StrictArray(value)
    if isinstance(value, np.generic):
        _check_dtype(value.dtype, "a scalar")
        return StrictArray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(wrap(v) for v in value)
    if isinstance(value, list):
        return [wrap(v) for v in value]
    return value


def unwrap(value: Any, what: str, host_ok: bool = False) -> Any:
    """The NumPy arrays behind ``value``; a host array (not 0-d) is refused unless
    ``host_ok``."""
    if isinstance(value, StrictArray):
        return value._a
    if isinstance(value, np.ndarray):
        if not host_ok and value.ndim > 0:
            raise RECORDER.refuse(f"a host numpy array {value.shape} mixed into {what}")
        return value
    if isinstance(value, tuple):
        return tuple(unwrap(v, what, host_ok) for v in value)
    if isinstance(value, list):
        return [unwrap(v, what, host_ok) for v in value]
    if isinstance(value, dict):
        return {k: unwrap(v, what, host_ok) for k, v in value.items()}
    return value


def _call(fn: Any, name: str, args: tuple, kwargs: dict, host_ok: bool = False) -> Any:
    _check_dtype(kwargs.get("dtype"), name)
    result = fn(*unwrap(args, name, host_ok), **unwrap(kwargs, name, host_ok))
    return wrap(result)


def _binary(name: str, reflected: bool = False):
    op = getattr(operator, name)

    def method(self, other):
        other = unwrap(other, f"operator {name}")
        return wrap(op(other, self._a) if reflected else op(self._a, other))

    method.__name__ = f"__r{name}__" if reflected else f"__{name}__"
    return method


def _inplace(name: str):
    op = getattr(operator, f"i{name.rstrip('_')}")

    def method(self, other):
        self._a = op(self._a, unwrap(other, f"operator {name}="))
        return self

    return method


class StrictArray:
    """A device array stand-in: a NumPy array reachable only through CuPy's API."""

    __slots__ = ("_a",)
    __array_priority__ = 1000

    def __init__(self, array: np.ndarray) -> None:
        self._a = array

    # -- what CuPy refuses -------------------------------------------------------------------
    def __array__(self, *args, **kwargs):
        raise RECORDER.refuse("implicit conversion of a device array to numpy (np.asarray "
                              "or a numpy call on it)")

    def __array_function__(self, func, types, args, kwargs):
        raise RECORDER.refuse(f"numpy function np.{func.__name__} called on a device array "
                              f"(use xp.{func.__name__})")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and inputs and isinstance(inputs[0], np.generic):
            # A NumPy scalar on the left of an operator (``x.dtype.type(alpha) * x``): CuPy's
            # own __array_ufunc__ serves it with the CuPy ufunc, on the device.
            return StrictUfunc(ufunc)(*inputs, **kwargs)
        suffix = "" if method == "__call__" else f".{method}"
        raise RECORDER.refuse(f"numpy ufunc np.{ufunc.__name__}{suffix} called on a device "
                              f"array (use xp.{ufunc.__name__})")

    def __iter__(self):
        if self._a.size > SMALL:
            raise RECORDER.refuse(f"iterating over a device array of {self._a.size} elements")
        return iter([wrap(row) for row in self._a])

    def tolist(self):
        if self._a.size > SMALL:
            raise RECORDER.refuse(f".tolist() on a device array of {self._a.size} elements")
        return self._a.tolist()

    def item(self, *args):
        if self._a.size > SMALL:
            raise RECORDER.refuse(f".item() on a device array of {self._a.size} elements")
        return self._a.item(*args)

    def get(self) -> np.ndarray:
        """CuPy's explicit device-to-host copy (allowed: a kernel asks for it by name)."""
        return self._a.copy()

    def astype(self, dtype, *args, **kwargs):
        _check_dtype(dtype, "astype")
        return wrap(self._a.astype(dtype, *args, **kwargs))

    # -- everything else: NumPy's, through the wrapper ---------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name in ("__array_interface__", "__array_struct__"):
            # (NumPy converts through these before trying __array__: a host copy)
            raise RECORDER.refuse(f"implicit conversion of a device array to numpy ({name})")
        if name.startswith("__"):
            raise AttributeError(name)
        if name in ARRAY_ONLY:
            raise RECORDER.refuse(f"ndarray.{name}")
        value = getattr(self._a, name)
        if callable(value):
            def method(*args, **kwargs):
                return _call(value, f"ndarray.{name}", args, kwargs)
            return method
        return wrap(value)

    def __getitem__(self, key):
        return wrap(self._a[unwrap(key, "an index", host_ok=True)])

    def __setitem__(self, key, value):
        # (host -> device copies on item assignment are allowed: cupy accepts them)
        self._a[unwrap(key, "an index", host_ok=True)] = unwrap(value, "assignment",
                                                               host_ok=True)

    def __len__(self):
        return len(self._a)

    def __bool__(self):
        return bool(self._a)

    def __int__(self):
        return int(self._a)

    def __float__(self):
        return float(self._a)

    def __complex__(self):
        return complex(self._a)

    def __index__(self):
        return operator.index(self._a)

    def __repr__(self):
        return f"StrictArray({self._a!r})"

    def __format__(self, spec):
        return format(self._a, spec)

    def __neg__(self):
        return wrap(-self._a)

    def __pos__(self):
        return wrap(+self._a)

    def __abs__(self):
        return wrap(abs(self._a))

    def __invert__(self):
        return wrap(~self._a)

    __hash__ = None

    @property
    def T(self):
        return wrap(self._a.T)


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_",
              "or_", "xor", "lshift", "rshift", "lt", "le", "gt", "ge", "eq", "ne"):
    _dunder = _name.rstrip("_")
    setattr(StrictArray, f"__{_dunder}__", _binary(_name))
    if _name not in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(StrictArray, f"__r{_dunder}__", _binary(_name, reflected=True))
        setattr(StrictArray, f"__i{_dunder}__", _inplace(_name))
StrictArray.__divmod__ = lambda self, other: wrap(divmod(self._a, unwrap(other, "divmod")))


class StrictUfunc:
    """A NumPy ufunc called on the namespace's arrays; only CuPy's methods are offered."""

    def __init__(self, ufunc: np.ufunc) -> None:
        self._ufunc = ufunc
        self.__name__ = ufunc.__name__
        self.nin, self.nout = ufunc.nin, ufunc.nout

    def __call__(self, *args, **kwargs):
        return _call(self._ufunc, f"xp.{self.__name__}", args, kwargs)

    def __getattr__(self, name: str) -> Any:
        allowed = UFUNC_METHODS.get(name)
        if allowed is None:
            return getattr(self._ufunc, name)
        if self.__name__ not in allowed:
            raise RECORDER.refuse(f"ufunc method xp.{self.__name__}.{name}")
        method = getattr(self._ufunc, name)
        return lambda *args, **kwargs: _call(method, f"xp.{self.__name__}.{name}", args, kwargs)


class StrictNamespace:
    """``numpy`` as CuPy offers it: see the module docstring."""

    def __init__(self, module: Any = np, path: str = "") -> None:
        self._module = module
        self._path = path
        self._missing = NUMPY_ONLY if not path else SUBMODULES[path]

    def __getattr__(self, name: str) -> Any:
        qualified = f"{self._path}.{name}" if self._path else name
        if name in self._missing:
            raise RECORDER.refuse(f"xp.{qualified} (numpy only)")
        if name == "ndarray" and not self._path:
            return StrictArray
        value = getattr(self._module, name)
        if qualified in SUBMODULES:
            return StrictNamespace(value, qualified)
        if hasattr(value, "__file__") or type(value).__name__ == "module":
            raise RECORDER.refuse(f"xp.{qualified} (a numpy submodule the CuPy backend "
                                  f"does not offer)")
        if isinstance(value, np.ufunc):
            return StrictUfunc(value)
        if isinstance(value, type) or not callable(value):
            if isinstance(value, type) and issubclass(value, np.generic):
                _check_dtype(value, f"xp.{qualified}")
            return value  # dtypes, classes, constants
        host_ok = name in CONVERTERS and not self._path

        def function(*args, **kwargs):
            return _call(value, f"xp.{qualified}", args, kwargs, host_ok)

        function.__name__ = name
        return function


class StrictBackend(Backend):
    """The shared kernel table over the strict namespace, on a stand-in device.

    Like the CuPy backend it holds no string tensors; host copies in and out are explicit.
    """

    name = "strict-xp"
    xp = StrictNamespace()
    string_tensors = False

    def from_numpy(self, array: np.ndarray) -> StrictArray:
        array = np.array(array, copy=True)
        _check_dtype(array.dtype, "a host copy in")
        return StrictArray(array)

    def to_numpy(self, array: Any) -> np.ndarray:
        return array._a if isinstance(array, StrictArray) else np.asarray(array)

    def copy_into(self, dst: Any, src: Any) -> None:
        dst[...] = src


def create_backend(device: Device) -> StrictBackend:
    """The module interface ``portable.device`` loads backends through: device 0 holds the
    CUDA backend's table (shared kernels, its overrides and refusals), device 1 the shared
    table alone (to tell whether an override is still needed)."""
    table = cuda_kernels(kernels) if device.device_id == 0 else dict(kernels)
    return StrictBackend(device, table)
