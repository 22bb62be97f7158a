"""Building blocks for turning one MXNet 1.x graph node into portable's ONNX-named ops: the
node's attributes read from MXNet's strings (``"(3, 3)"``, ``"True"``, ``"1e-05"``) with checks
that name the file, node, op and key, and a ``NodeBuilder`` that emits ``SymNode``s.

The last node a converter emits carries the MXNet node's name, so the loaded symbol's outputs
are named as MXNet names them (``fc1_output``); helper nodes are named ``<node>/<what><n>``.

Example:
    >>> attrs = MXNetAttrs({"kernel": "(3, 3)", "no_bias": "True"}, "m.json", "conv0",
    ...                    "Convolution")
    >>> attrs.ints("kernel"), attrs.bool("no_bias", False)
    ([3, 3], True)
"""
from __future__ import annotations

import ast
from typing import Any, NoReturn, Sequence

import numpy as np

from portable.errors import PortableError, SerializationError
from portable.ops import registry
from portable.symbol.nodes import SymNode
from portable.symbol.serialize import MAX_OUTPUTS, _check_attrs

Entry = tuple[SymNode, int]

# An attribute is a short literal; a longer one is a hostile file, not a model.
MAX_ATTR_CHARS = 4096
# MXNet's dtype names and mshadow type flags (the ``__dtype__`` of a variable).
DTYPE_FLAGS = {0: "float32", 1: "float64", 2: "float16", 3: "uint8", 4: "int32", 5: "int8",
               6: "int64", 7: "bool"}
_MISSING = object()


class MXNetAttrs:
    """One MXNet node's attributes (strings), read as typed values.

    Args:
        raw: the attribute strings of the node.
        source, node, op: for error messages.
    """

    def __init__(self, raw: dict[str, str], source: str, node: str, op: str) -> None:
        self.raw, self.source, self.node, self.op = raw, source, node, op

    def fail(self, message: str) -> NoReturn:
        raise SerializationError(f"{self.source}: node {self.node!r} (op {self.op}): {message}")

    def _literal(self, key: str) -> Any:
        text = self.raw[key]
        if len(text) > MAX_ATTR_CHARS:
            self.fail(f"attribute {key!r} is {len(text)} characters long (at most "
                      f"{MAX_ATTR_CHARS})")
        try:
            return ast.literal_eval(text.strip())  # literals only: no code runs
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return text.strip()

    def _get(self, key: str, default: Any, kind: str, check) -> Any:
        if key not in self.raw:
            return default
        value = self._literal(key)
        if value is None:
            return default
        if not check(value):
            self.fail(f"attribute {key}={self.raw[key]!r:.60} is not {kind}")
        return value

    def has(self, key: str) -> bool:
        return key in self.raw and self._literal(key) is not None

    def int(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default, "an integer", _is_int)
        if value is _MISSING:
            self.fail(f"attribute {key!r} is required")
        return int(value) if value is not None and not isinstance(value, bool) else value

    def float(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default, "a number",
                          lambda v: isinstance(v, (int, float)) and not isinstance(v, bool))
        if value is _MISSING:
            self.fail(f"attribute {key!r} is required")
        return None if value is None else float(value)

    def bool(self, key: str, default: bool) -> bool:
        if key not in self.raw:
            return default
        text = self.raw[key].strip().lower()
        if text in ("true", "1"):
            return True
        if text in ("false", "0"):
            return False
        self.fail(f"attribute {key}={self.raw[key]!r:.60} is not True or False")

    def str(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self.raw:
            if default is _MISSING:
                self.fail(f"attribute {key!r} is required")
            return default
        return self.raw[key].strip()

    def ints(self, key: str, default: Any = _MISSING, allow_none: bool = False) -> Any:
        """A tuple attribute (``"(3, 3)"``; a bare ``"3"`` is one element); ``allow_none``
        keeps None entries (``slice``'s ``begin=(None, 2)``)."""
        if key not in self.raw:
            if default is _MISSING:
                self.fail(f"attribute {key!r} is required")
            return default
        value = self._literal(key)
        if value is None:
            return default if default is not _MISSING else []
        if _is_int(value):
            value = [value]
        if not isinstance(value, (list, tuple)) or not all(
                _is_int(v) or (allow_none and v is None) for v in value):
            self.fail(f"attribute {key}={self.raw[key]!r:.60} is not a tuple of integers")
        return [None if v is None else int(v) for v in value]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < (1 << 62)


class NodeBuilder:
    """Emits the portable nodes for one MXNet node named ``name``.

    Args:
        attrs: the node's attributes; ``attrs.fail`` names the file, node and op.
    """

    def __init__(self, attrs: MXNetAttrs) -> None:
        self.attrs = attrs
        self.name = attrs.node
        self._count = 0

    def fail(self, message: str) -> NoReturn:
        self.attrs.fail(message)

    def _helper_name(self, what: str) -> str:
        self._count += 1
        return f"{self.name}/{what}{self._count}"

    def emit(self, op: str, inputs: Sequence[Entry | None], final: bool = False,
             **attrs: Any) -> Entry:
        """A node of ``op`` over ``inputs``; ``final`` gives it the MXNet node's name.
        Returns its first output (``emit_all`` returns every output)."""
        return self.emit_all(op, inputs, final, 1, **attrs)[0]

    def emit_all(self, op: str, inputs: Sequence[Entry | None], final: bool = False,
                 count: int = 1, **attrs: Any) -> list[Entry]:
        if not 1 <= count <= MAX_OUTPUTS:
            self.fail(f"{count} outputs is out of range (1 to {MAX_OUTPUTS})")
        name = self.name if final else self._helper_name(op.rsplit(".", 1)[-1].lower())
        inputs = list(inputs)
        while inputs and inputs[-1] is None:
            inputs.pop()
        node = SymNode(op, name, {k: v for k, v in attrs.items() if v is not None}, inputs,
                       count)
        try:
            _check_attrs(registry.get(op), node)
        except SerializationError:
            raise
        except PortableError as exc:  # a value from the file the op refuses
            self.fail(str(exc))
        return [(node, i) for i in range(count)]

    def const(self, value: Any, dtype: Any = None) -> Entry:
        array = np.asarray(value, dtype=dtype)
        node = SymNode("Constant", self._helper_name("const"), {"value": array})
        return (node, 0)

    def ints(self, values: Sequence[int]) -> Entry:
        """A 1-D int64 constant (axes, shapes, slice bounds)."""
        return self.const(np.asarray(list(values), np.int64).reshape(-1))

    def scalar(self, value: float) -> Entry:
        """A Python number typed like the other operand of its consumer, as MXNet's scalar ops
        cast their scalar to the data's dtype."""
        node = SymNode("Constant", self._helper_name("scalar"),
                       {"value": np.asarray(value, np.float32)}, scalar=True)
        return (node, 0)

    def shape_of(self, x: Entry) -> Entry:
        return self.emit("Shape", [x])

    def channel_view(self, param: Entry, data: Entry) -> Entry:
        """``param`` of shape (C,) viewed as (C, 1, ..., 1) so that it broadcasts along axis 1
        of ``data`` whatever its rank (known only when shapes are)."""
        rank = self.emit("Shape", [self.shape_of(data)])
        ones = self.emit("ConstantOfShape", [self.emit("Sub", [rank, self.ints([2])])],
                         value=np.ones(1, np.int64))
        target = self.emit("Concat", [self.ints([-1]), ones], axis=0)
        return self.emit("Reshape", [param, target])

    def reshape_like(self, x: Entry, like: Entry, final: bool = False) -> Entry:
        return self.emit("Reshape", [x, self.shape_of(like)], final=final)


def set_hint(entry: Entry | None, rule: str, source: Entry, **params: Any) -> None:
    """Give a parameter variable a shape rule (as the layer functions do) unless it has a
    declared shape or a rule already, so ``infer_shape`` needs only the data's shape."""
    if entry is None:
        return
    node = entry[0]
    if node.is_variable and node.shape is None and node.shape_hint is None:
        node.shape_hint = (rule, source, params)
