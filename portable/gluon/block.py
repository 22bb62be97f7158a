"""Block and HybridBlock: the Gluon model containers (MXNet 1.x ``gluon.Block``).

A Block owns parameters and child blocks, registered by attribute assignment. Names follow
MXNet 1.x: a block's prefix is ``<class name lower><count>_`` (``dense0_``), nested inside its
parent's prefix when created in the parent's ``name_scope()``, and parameters are named
``prefix + name`` (``mlp0_dense0_weight``).

A HybridBlock writes its computation once, in ``hybrid_forward(F, x, *args, **params)``, where
``F`` is ``portable.nd`` (imperative, recorded by autograd) or ``portable.sym`` (symbolic).
After ``hybridize()`` a call with NDArrays runs through a CachedOp: traced once per input
signature into the IR, compiled, and pushed to the engine as one op.

Saving: ``save_parameters`` uses MXNet 1.x's structural names (the attribute path through the
children: ``0.weight``, ``features.1.bias``), independent of the prefixes; ``load_parameters``
reads those, and falls back to prefixed names (``dense0_weight``, as ``ParameterDict.save``
writes them) for a file without any structural name.

Example:
    >>> import portable as pt
    >>> from portable.gluon import nn
    >>> net = nn.HybridSequential()
    >>> net.add(nn.Dense(8, activation="relu"), nn.Dense(2))
    >>> net.initialize(); net.hybridize()
    >>> net(pt.nd.ones((4, 3))).shape
    (4, 2)
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any, Callable

from portable import autograd
from portable.errors import PortableError
from portable.gluon.parameter import DeferredInitializationError, Parameter
from portable.gluon.parameter_dict import (ParameterDict, load_into, load_parameter_file,
                                           save_parameter_file, spread_shared)
from portable.gluon.utils import flatten
from portable.io.exporters import get_exporter
from portable.numpy.mode import is_np_array
from portable.numpy.multiarray import as_np

_name_counters: dict[str, int] = {}
_name_lock = threading.Lock()


def _auto_prefix(hint: str) -> str:
    with _name_lock:
        count = _name_counters.get(hint, 0)
        _name_counters[hint] = count + 1
    return f"{hint}{count}_"


class _BlockScope:
    """The name scope of a block: children created inside it get the block's prefix."""

    _current = threading.local()

    def __init__(self, block: "Block") -> None:
        self._block = block
        self._counter: dict[str, int] = {}
        self._old: "_BlockScope | None" = None

    @staticmethod
    def create(prefix: str | None, params: ParameterDict | None,
               hint: str) -> tuple[str, ParameterDict]:
        current = getattr(_BlockScope._current, "value", None)
        if current is None:
            if prefix is None:
                prefix = _auto_prefix(hint)
            params = ParameterDict(prefix) if params is None else ParameterDict(params.prefix,
                                                                                params)
            return prefix, params
        if prefix is None:
            count = current._counter.get(hint, 0)
            prefix = f"{hint}{count}_"
            current._counter[hint] = count + 1
        if params is None:
            parent = current._block.params
            params = ParameterDict(parent.prefix + prefix, parent._shared)
        else:
            params = ParameterDict(params.prefix, params)
        return current._block.prefix + prefix, params

    def __enter__(self) -> "_BlockScope":
        if self._block._empty_prefix:
            return self
        self._old = getattr(_BlockScope._current, "value", None)
        _BlockScope._current.value = self
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._block._empty_prefix:
            return
        _BlockScope._current.value = self._old


def _indent(text: str, spaces: int) -> str:
    lines = text.split("\n")
    return "\n".join([lines[0]] + [" " * spaces + line for line in lines[1:]])


class HookHandle:
    """Returned by ``register_forward_hook``: ``detach()`` removes the hook."""

    def __init__(self, hooks: OrderedDict, hook: Callable) -> None:
        self._hooks, self._key = hooks, id(hook)
        hooks[self._key] = hook

    def detach(self) -> None:
        self._hooks.pop(self._key, None)


class Block:
    """Base class of all layers and models.

    Args:
        prefix: the name prefix of the block's parameters and children (default: automatic,
            ``<class name lower><count>_``).
        params: a ParameterDict whose parameters this block shares.

    Example:
        >>> class Model(Block):
        ...     def __init__(self, **kwargs):
        ...         super().__init__(**kwargs)
        ...         with self.name_scope():
        ...             self.dense = nn.Dense(4)
        ...     def forward(self, x):
        ...         return self.dense(x)
    """

    def __init__(self, prefix: str | None = None, params: ParameterDict | None = None) -> None:
        self._empty_prefix = prefix == ""
        self._prefix, self._params = _BlockScope.create(prefix, params, self._alias())
        self._name = self._prefix[:-1] if self._prefix.endswith("_") else self._prefix
        self._scope = _BlockScope(self)
        self._children: OrderedDict[str, Block] = OrderedDict()
        self._reg_params: dict[str, Parameter] = {}
        self._forward_hooks: OrderedDict[int, Callable] = OrderedDict()  # by HookHandle
        self._forward_pre_hooks: OrderedDict[int, Callable] = OrderedDict()

    def __repr__(self) -> str:
        lines = [f"  ({key}): {_indent(repr(block), 2)}" for key, block in self._children.items()]
        return f"{type(self).__name__}(\n" + "\n".join(lines) + "\n)"

    def __setattr__(self, name: str, value: Any) -> None:
        existing = self.__dict__.get(name)
        if isinstance(existing, (Parameter, Block)) and not isinstance(value, type(existing)):
            raise TypeError(f"changing attribute {name!r} of {self.name!r} from "
                            f"{type(existing).__name__} to {type(value).__name__} is not allowed")
        if isinstance(value, Block):
            self.register_child(value, name)
        elif isinstance(value, Parameter):
            if name in self.__dict__.get("_reg_params", {}) and existing is not value:
                raise PortableError(f"overriding Parameter attribute {name!r} of "
                                    f"{self.name!r} is not allowed")
            self._reg_params[name] = value
        super().__setattr__(name, value)

    def _alias(self) -> str:
        return type(self).__name__.lower()

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def name(self) -> str:
        return self._name

    def name_scope(self) -> _BlockScope:
        """Children created inside ``with self.name_scope():`` get this block's prefix."""
        return self._scope

    @property
    def params(self) -> ParameterDict:
        """This block's own parameters (not its children's; see ``collect_params``)."""
        return self._params

    def collect_params(self, select: str | None = None) -> ParameterDict:
        """The parameters of this block and its children, in registration order.

        Args:
            select: a regular expression; only names it matches (``re.match``) are kept,
                e.g. ``'.*weight|.*bias'``.
        """
        result = ParameterDict(self._params.prefix)
        pattern = re.compile(select) if select else None
        own = {k: v for k, v in self._params.items() if pattern is None or pattern.match(k)}
        own.update({p.name: p for p in self._reg_params.values()
                    if pattern is None or pattern.match(p.name)})
        result.update(own)
        for child in self._children.values():
            result.update(child.collect_params(select))
        return result

    def _collect_params_with_prefix(self, prefix: str = "") -> dict[str, Parameter]:
        if prefix:
            prefix += "."
        found = {prefix + key: value for key, value in self._reg_params.items()}
        for name, child in self._children.items():
            found.update(child._collect_params_with_prefix(prefix + name))
        return found

    def register_child(self, block: "Block", name: str | None = None) -> None:
        """Register ``block`` as a child (attribute assignment does this)."""
        if name is None:
            name = str(len(self._children))
        self._children[name] = block

    def register_forward_pre_hook(self, hook: Callable) -> "HookHandle":
        """``hook(block, inputs)`` runs before each forward; ``.detach()`` the handle to
        remove it."""
        return HookHandle(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook: Callable) -> "HookHandle":
        """``hook(block, inputs, outputs)`` runs after each forward."""
        return HookHandle(self._forward_hooks, hook)

    def apply(self, fn: Callable[["Block"], Any]) -> "Block":
        """Apply ``fn`` to every child recursively, then to this block."""
        for child in self._children.values():
            child.apply(fn)
        fn(self)
        return self

    def initialize(self, init: Any = None, device: Any = None, verbose: bool = False,
                   force_reinit: bool = False, ctx: Any = None) -> None:
        """Initialise every parameter (see ``ParameterDict.initialize``).

        Args:
            init: an initializer applied by parameter name (default ``portable.init.Uniform()``).
            device, ctx: a Device or a list of them (default the CPU).
            force_reinit: re-initialise parameters that already have data.
        """
        device = device if device is not None else ctx
        self.collect_params().initialize(init, device, verbose, force_reinit)

    def hybridize(self, active: bool = True, **kwargs: Any) -> None:
        """Hybridize every HybridBlock child (a plain Block itself stays imperative)."""
        for child in self._children.values():
            child.hybridize(active, **kwargs)

    def cast(self, dtype: Any) -> None:
        """Convert every parameter (and future data) to ``dtype``."""
        for child in self._children.values():
            child.cast(dtype)
        for param in self.params.values():
            param.cast(dtype)
        for param in self._reg_params.values():
            param.cast(dtype)

    def zero_grad(self) -> None:
        self.collect_params().zero_grad()

    def reset_device(self, device: Any) -> None:
        self.collect_params().reset_device(device)

    reset_ctx = reset_device

    # -- saving and loading ----------------------------------------------------------------
    def save_parameters(self, filename: str, deduplicate: bool = False,
                        format: str = "safetensors") -> None:
        """Save the parameters under their structural names (``0.weight``) as safetensors.

        Args:
            filename: the target file (written atomically).
            deduplicate: save a parameter shared by several blocks once, under its first name.
            format: ``"safetensors"``, or ``"mxnet"`` for MXNet's binary NDArray format (the
                file MXNet 1.x's ``save_parameters`` writes, byte for byte).
        """
        arrays, seen = {}, set()
        for name, param in self._collect_params_with_prefix().items():
            if deduplicate and id(param) in seen:
                continue
            seen.add(id(param))
            arrays[name] = param._reduce()
        save_parameter_file(filename, arrays, format)

    def load_parameters(self, filename: str, device: Any = None, allow_missing: bool = False,
                        ignore_extra: bool = False, cast_dtype: bool = False,
                        dtype_source: str = "current", ctx: Any = None) -> None:
        """Load parameters saved by ``save_parameters`` (or prefixed names, see the module
        docstring), from safetensors or MXNet's binary NDArray format. Missing, extra,
        mis-shaped or mistyped parameters (all checked before any is set), two values for one
        shared parameter, and unreadable files raise
        SerializationError naming the file and the parameter."""
        device = device if device is not None else ctx
        loaded = load_parameter_file(filename)
        params = self._collect_params_with_prefix()
        if loaded and not any("." in key for key in loaded):  # saved by ParameterDict.save
            self.collect_params().load(filename, device, allow_missing, ignore_extra,
                                       self.prefix, cast_dtype, dtype_source)
            return
        spread_shared(params, loaded, filename)  # a shared parameter may be saved once
        load_into(params, loaded, filename, device, allow_missing, ignore_extra, cast_dtype,
                  dtype_source)
        self._clear_cached_ops()

    save_params = save_parameters
    load_params = load_parameters

    def _clear_cached_ops(self) -> None:
        for child in self._children.values():
            child._clear_cached_ops()

    # -- running ---------------------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        for hook in self._forward_pre_hooks.values():
            hook(self, args)
        out = self.forward(*args)
        if is_np_array():  # MXNet's NumPy mode (npx.set_np): blocks hand out mx.np arrays
            out = as_np(out)
        for hook in self._forward_hooks.values():
            hook(self, args, out)
        return out

    def forward(self, *args: Any) -> Any:
        """The computation; override it in subclasses."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward()")


_imperative_only = threading.local()


class HybridBlock(Block):
    """A Block whose computation is written once for both NDArrays and Symbols, and can be
    compiled with ``hybridize()``.

    Subclasses implement ``hybrid_forward(self, F, x, *args, **params)``; ``params`` holds the
    block's registered parameters by attribute name (NDArrays, or Symbol variables).
    Subclasses with parameters of deferred shape implement ``infer_shape(*args)``.
    """

    def __init__(self, prefix: str | None = None, params: ParameterDict | None = None) -> None:
        super().__init__(prefix, params)
        self._active = False
        self._flags: dict[str, Any] = {}
        self._cached_op = None

    def register_child(self, block: Block, name: str | None = None) -> None:
        if not isinstance(block, HybridBlock):
            raise PortableError(f"children of HybridBlock {self.name!r} must be HybridBlocks, "
                                f"but {block.name!r} is a {type(block).__name__}; use "
                                f"HybridSequential instead of Sequential")
        super().register_child(block, name)
        self._clear_cached_ops()

    def hybridize(self, active: bool = True, static_alloc: bool = False,
                  static_shape: bool = False, **kwargs: Any) -> None:
        """Compile this block on its next calls (one plan per input signature).

        Args:
            active: False goes back to imperative execution.
            static_alloc, static_shape: accepted for MXNet compatibility; plans are always
                allocated once per signature.
        """
        self._active = bool(active)
        self._flags = {"static_alloc": static_alloc, "static_shape": static_shape, **kwargs}
        self._cached_op = None
        super().hybridize(active, static_alloc=static_alloc, static_shape=static_shape,
                          **kwargs)

    def _clear_cached_ops(self) -> None:
        self._cached_op = None
        super()._clear_cached_ops()

    def cast(self, dtype: Any) -> None:
        self._cached_op = None
        super().cast(dtype)

    def infer_shape(self, *args: Any) -> None:
        """Set the shapes of this block's deferred parameters from the input arrays."""
        pending = [p.name for p in self._reg_params.values() if p._deferred_init]
        raise PortableError(f"block {self.name!r} cannot infer the shape of parameter(s) "
                            f"{pending}; give their shapes, or implement infer_shape()")

    def _input_names(self, count: int) -> list[str]:
        return ["data"] if count == 1 else [f"data{i}" for i in range(count)]

    def _symbolic_forward(self, *args: Any) -> Any:
        from portable import symbol as sym

        params = {name: p.var() for name, p in self._reg_params.items()}
        return self.hybrid_forward(sym, *args, **params)

    def forward(self, x: Any, *args: Any) -> Any:
        """Run on NDArrays (imperatively, or compiled when hybridized) or trace on Symbols."""
        from portable.symbol import Symbol

        leaves, _ = flatten((x,) + args)
        if leaves and isinstance(leaves[0], Symbol):
            return self._symbolic_forward(x, *args)
        if self._active and not getattr(_imperative_only, "value", False):
            return self._call_cached_op(x, *args)
        device = leaves[0].device if leaves else None
        try:
            params = {name: p.data(device) for name, p in self._reg_params.items()}
        except DeferredInitializationError:
            self.infer_shape(x, *args)
            for p in self._reg_params.values():
                p._finish_deferred_init()
            params = {name: p.data(device) for name, p in self._reg_params.items()}
        from portable import ndarray as nd

        return self.hybrid_forward(nd, x, *args, **params)

    def _call_cached_op(self, *args: Any) -> Any:
        from portable.gluon.cached_op import CachedOp

        if self._cached_op is None:
            self._cached_op = CachedOp(self, self._flags)
        if any(p._deferred_init for p in self._cached_op.params().values()):
            # Shapes are inferred layer by layer on a first imperative pass (its result and
            # any state update are discarded: inference mode, not recorded).
            _imperative_only.value = True
            try:
                with autograd.pause(train_mode=False):
                    self.forward(*args)
            finally:
                _imperative_only.value = False
        return self._cached_op(*args)

    def hybrid_forward(self, F: Any, x: Any, *args: Any, **params: Any) -> Any:
        """The computation, with ``F`` either ``portable.nd`` or ``portable.sym``."""
        raise NotImplementedError(f"{type(self).__name__} must implement hybrid_forward()")

    # -- export ----------------------------------------------------------------------------
    def _export_symbol(self) -> Any:
        """The symbol of this block on inputs named like a traced call's (the structure of
        the last hybridized call, else one input)."""
        from portable import symbol as sym
        from portable.gluon.cached_op import split_symbols
        from portable.gluon.utils import regroup

        fmt = getattr(self._cached_op, "last_fmt", None) or ("T", (0,))
        names = self._input_names(_leaf_count(fmt))
        out = split_symbols(self._symbolic_forward(*regroup([sym.var(n) for n in names], fmt)))
        outs, _ = flatten(out, lambda v: isinstance(v, sym.Symbol))
        return sym.Group(outs) if len(outs) > 1 else outs[0]

    def export(self, path: str, epoch: int = 0) -> tuple[str, str]:
        """Save ``path-symbol.json`` (the traced symbol) and ``path-%04d.params`` (the
        parameters as safetensors, keys ``arg:<name>`` and ``aux:<name>``), MXNet 1.x style.

        Returns:
            The two file names. ``SymbolBlock.imports`` loads them back.
        """
        symbol = self._export_symbol()
        symbol_file, params_file = f"{path}-symbol.json", f"{path}-{epoch:04d}.params"
        args, aux = set(symbol.list_arguments()), set(symbol.list_auxiliary_states())
        arrays = {}
        for name, param in self.collect_params().items():
            if name in args:
                arrays[f"arg:{name}"] = param._reduce()
            elif name in aux:
                arrays[f"aux:{name}"] = param._reduce()
        symbol.save(symbol_file)
        save_parameter_file(params_file, arrays)
        return symbol_file, params_file

    def inference_graph(self, example_inputs: Any) -> tuple[Any, dict[str, Any]]:
        """The inference graph traced on ``example_inputs`` (Dropout off, BatchNorm on its
        running statistics) and the parameter values (NumPy) it reads, by input name: what
        :meth:`export_onnx` writes, and what ``portable.predict.deployment.save(graph, path,
        params)`` stores with no ONNX in between.

        Example:
            >>> graph, params = net.inference_graph(pt.nd.zeros((1, 64)))   # doctest: +SKIP
        """
        from portable.gluon.cached_op import CachedOp
        from portable.passes.training import set_training_mode

        inputs = example_inputs if isinstance(example_inputs, (list, tuple)) else [example_inputs]
        leaves, fmt = flatten(tuple(inputs))
        graph, sources, _ = CachedOp(self).trace(leaves, fmt)
        params = {name: src._reduce() for name, (kind, src) in
                  zip(graph.input_names, sources) if kind == "param"}
        return set_training_mode(graph, False)[0], params

    def export_onnx(self, path: str, example_inputs: Any, *, dynamic_batch: bool = False,
                    opset: int | None = None) -> Any:
        """Export the inference graph traced on ``example_inputs`` to an ONNX file through the
        ``onnx`` exporter registered with ``portable.io.exporters`` (``exporters.onnx``).

        Args:
            path: the ``.onnx`` file to write (atomically).
            example_inputs: an array, or a list of them, as ``forward`` takes them.
            dynamic_batch: write axis 0 of the inputs, and of the outputs that share it, as
                the symbolic dim ``batch`` (PyTorch's ``dynamic_axes`` for the usual case),
                so the file runs at any batch size; by default it keeps the example's.
            opset: the ai.onnx opset (default: the newest the installed onnxruntime runs).

        Returns:
            The ONNX ModelProto.
        """
        export_model = get_exporter("onnx")
        graph, params = self.inference_graph(example_inputs)
        return export_model(graph, params, path, opset, dynamic_batch=dynamic_batch)


def _leaf_count(fmt: Any) -> int:
    if fmt == 0:
        return 1
    if fmt == -1:
        return 0
    return sum(_leaf_count(child) for child in fmt[1])
