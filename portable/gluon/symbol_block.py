"""SymbolBlock: a HybridBlock made from a Symbol (MXNet 1.x ``gluon.SymbolBlock``).

Every argument of the symbol that is not an input becomes a parameter, every auxiliary state a
parameter with ``grad_req='null'``; parameter names are the symbol's variable names (no prefix).
Called with NDArrays it always runs compiled (a CachedOp); called with Symbols it returns the
symbol with the inputs substituted.

``SymbolBlock.imports`` loads what ``HybridBlock.export`` wrote (symbol JSON plus safetensors
parameters), what MXNet 1.x wrote (``HybridBlock.export`` or ``Module.save_checkpoint``: its
symbol JSON, read by ``portable.symbol.mxnet_json``, and its binary ``.params`` with
``arg:``/``aux:`` keys), or an ONNX model through ``portable.io.onnx.import_model``.

Example:
    >>> net.export("/tmp/mlp")                                              # doctest: +SKIP
    >>> block = SymbolBlock.imports("/tmp/mlp-symbol.json", ["data"],
    ...                             "/tmp/mlp-0000.params")                 # doctest: +SKIP
    >>> block(pt.nd.ones((2, 4)))                                           # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from portable.errors import PortableError
from portable.gluon.block import HybridBlock
from portable.gluon.parameter_dict import ParameterDict
from portable.symbol.symbol import compose


class SymbolBlock(HybridBlock):
    """A block running ``outputs`` on ``inputs``.

    Args:
        outputs: a Symbol (or a list of Symbols, grouped).
        inputs: the input variables (a Symbol or a list of them).
        params: a ParameterDict with parameters to share (e.g. already loaded ones).
    """

    def __init__(self, outputs: Any, inputs: Any, params: ParameterDict | None = None) -> None:
        from portable import symbol as sym

        super().__init__(prefix=None, params=None)
        self._prefix = ""  # parameter names are the symbol's variable names
        self._params = ParameterDict("", params)
        if isinstance(inputs, sym.Symbol):
            inputs = list(inputs)
        if isinstance(outputs, (list, tuple)):
            outputs = outputs[0] if len(outputs) == 1 else sym.Group(list(outputs))
        names = []
        for item in inputs:
            node = item._entries[0][0] if len(item) == 1 else None
            if node is None or not node.is_variable:
                raise PortableError(f"SymbolBlock inputs must be variables, got {item!r}")
            names.append(node.name)
        declared = {n.name: n for n in outputs._nodes() if n.is_variable}
        for name in outputs.list_arguments():
            if name not in names:
                self._declare(name, declared[name], "write")
        for name in outputs.list_auxiliary_states():
            if name not in names:
                self._declare(name, declared[name], "null")
        self._outputs = outputs
        self._inputs = names

    def _declare(self, name: str, node: Any, grad_req: str) -> None:
        kwargs: dict[str, Any] = {"allow_deferred_init": True, "grad_req": grad_req}
        existing = self._params._get_impl(name)
        if existing is None:
            if node.shape is not None:
                kwargs["shape"] = node.shape
            if node.dtype is not None:
                kwargs["dtype"] = node.dtype
        param = self._params.get(name, **kwargs) if existing is None else existing
        self._reg_params[name] = param

    def __repr__(self) -> str:
        return f"SymbolBlock({self._inputs} -> {self._outputs.list_outputs()})"

    def _input_names(self, count: int) -> list[str]:
        if count != len(self._inputs):
            raise PortableError(f"SymbolBlock takes {len(self._inputs)} input(s) "
                                f"{self._inputs}, got {count}")
        return list(self._inputs)

    def _symbolic_forward(self, *args: Any) -> Any:
        from portable.gluon.utils import flatten

        leaves, _ = flatten(args)
        return compose(self._outputs, dict(zip(self._input_names(len(leaves)), leaves)))

    def forward(self, x: Any, *args: Any) -> Any:
        from portable.symbol import Symbol

        if isinstance(x, Symbol):
            return self._symbolic_forward(x, *args)
        return self._call_cached_op(x, *args)

    def infer_shape(self, *args: Any) -> None:
        from portable.gluon.utils import flatten

        leaves, _ = flatten(args)
        names = self._input_names(len(leaves))
        info = self._outputs._infer({n: x.shape for n, x in zip(names, leaves)},
                                    {n: x.dtype for n, x in zip(names, leaves)}, partial=True)
        unknown = []
        for param in self._reg_params.values():
            if param._deferred_init:
                if info is None or param.name not in info.types:
                    unknown.append(param.name)
                    continue
                param.shape = info.types[param.name].shape
        if unknown:
            raise PortableError(f"SymbolBlock cannot infer the shape of parameter(s) {unknown} "
                                f"from the input shapes; load them or declare their shapes")

    def _call_cached_op(self, *args: Any) -> Any:
        if any(p._deferred_init for p in self._reg_params.values()):
            self.infer_shape(*args)
            for p in self._reg_params.values():
                p._finish_deferred_init()
        return super()._call_cached_op(*args)

    @staticmethod
    def imports(symbol_file: str, input_names: str | Sequence[str], param_file: str | None = None,
                device: Any = None, allow_missing: bool = False, ignore_extra: bool = False,
                ctx: Any = None) -> "SymbolBlock":
        """Load a SymbolBlock from ``HybridBlock.export`` files (portable's or MXNet 1.x's,
        also a Module checkpoint's), or from an ONNX model.

        Args:
            symbol_file: ``*-symbol.json`` (portable's or MXNet's format), or an ``.onnx`` file
                (which holds its parameters).
            input_names: the input variable name(s); a Module checkpoint's label
                (``softmax_label``) is an input too, as in MXNet.
            param_file: the parameters of a symbol JSON file (safetensors, or MXNet's binary
                NDArray format).
            device, ctx: where the parameters go.
            allow_missing, ignore_extra: as in ``ParameterDict.load``.

        Example:
            >>> SymbolBlock.imports("m-symbol.json", "data", "m-0000.params")  # doctest: +SKIP
        """
        from portable import symbol as sym

        names = [input_names] if isinstance(input_names, str) else list(input_names)
        device = device if device is not None else ctx
        if str(symbol_file).lower().endswith(".onnx"):
            symbol, arg_params, aux_params = _import_onnx(symbol_file)
        else:
            symbol, arg_params, aux_params = sym.load(symbol_file), None, None
        block = SymbolBlock(symbol, [sym.var(n) for n in names])
        if param_file is not None:
            block.collect_params().load(param_file, device, allow_missing, ignore_extra,
                                        cast_dtype=True, dtype_source="saved")
        if arg_params is not None or aux_params is not None:
            loaded = {**(arg_params or {}), **(aux_params or {})}
            loaded = {k: np.asarray(v.asnumpy() if hasattr(v, "asnumpy") else v)
                      for k, v in loaded.items()}
            from portable.gluon.parameter_dict import load_into

            load_into(dict(block.collect_params().items()), loaded, str(symbol_file), device,
                      allow_missing, ignore_extra, cast_dtype=True, dtype_source="saved")
        return block


def _import_onnx(path: str) -> tuple:
    from portable.io.onnx.importer import import_model  # on first use: keeps the import light

    return import_model(path)
