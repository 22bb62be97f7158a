"""Reading and writing the records of portable's JSON graph documents: the parts the IR graph
format (``portable.io.graph_json``) and the symbol format (``portable.symbol.serialize``) share.

Both documents are a format tag and version, then a list of node records, each an op, a name
and attributes (values through ``portable.io.json_values``). This module parses the text,
checks the tag and version, encodes and decodes attribute dicts, and reads typed fields; every
failure is a SerializationError naming the source and where in the document it is
(``model.json: node 'conv': field "op" is missing``).

Example:
    >>> reader = RecordReader("g.json")
    >>> doc = reader.document('{"format": "f", "version": 1}', "f", 1, "graph")
    >>> reader.string({"name": 3}, "name", "node 0")
    Traceback (most recent call last):
    ...
    portable.errors.SerializationError: g.json: node 0: "name" must be a string, got 3
"""
from __future__ import annotations

import json
from typing import Any, Mapping, NoReturn

import numpy as np

from portable.errors import SerializationError
from portable.io.json_values import decode_value, encode_value


def encode_attrs(attrs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The JSON-able form of a node's attributes.

    Args:
        attrs: attribute name -> value.
        where: the node, for messages (``"graph 'g': node 'fc' (op Gemm)"``).

    Raises:
        SerializationError: a value JSON cannot hold (names ``where`` and the attribute).

    Example:
        >>> encode_attrs({"axes": (0, 1)}, "node 'r'")
        {'axes': [0, 1]}
    """
    encoded = {}
    for key, value in attrs.items():
        try:
            encoded[str(key)] = encode_value(value)
        except SerializationError as exc:
            raise SerializationError(f"{where}: attribute {key!r}: {exc}") from exc
    return encoded


class RecordReader:
    """Typed field access whose failures name the source and where in the document.

    Args:
        source: what the document was read from (a file name), first in every message.
        prefix: put before the place in every message (``"malformed symbol JSON: "``).
    """

    def __init__(self, source: str, prefix: str = "") -> None:
        self.source = source
        self.prefix = prefix

    def fail(self, where: str, message: str) -> NoReturn:
        raise SerializationError(f"{self.source}: {self.prefix}{where}: {message}")

    def document(self, text: str | bytes, fmt: str, version: int, kind: str) -> dict:
        """Parse ``text`` and check that it is a JSON object tagged ``fmt``, ``version``.

        Args:
            text: the JSON text.
            fmt: the expected ``"format"``; version: the expected ``"version"``.
            kind: what the document is, for messages (``"graph"``, ``"symbol file"``).
        """
        return self.check_document(parse_json(text, self.source), fmt, version, kind)

    def check_document(self, doc: Any, fmt: str, version: int, kind: str) -> dict:
        """``doc`` (already decoded), checked as :meth:`document` checks it."""
        if not isinstance(doc, dict):
            raise SerializationError(f"{self.source}: the {kind} is a JSON "
                                     f"{type(doc).__name__}, not an object")
        if doc.get("format") != fmt:
            raise SerializationError(f"{self.source}: not a portable {kind} (\"format\" is "
                                     f"{doc.get('format')!r}, expected {fmt!r})")
        if doc.get("version") != version:
            raise SerializationError(f"{self.source}: {kind} format version "
                                     f"{doc.get('version')!r} is not supported (this portable "
                                     f"reads version {version})")
        return doc

    def object(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            self.fail(where, f"expected a JSON object, got {type(value).__name__}")
        return value

    def field(self, record: dict, key: str, where: str) -> Any:
        if key not in record:
            self.fail(where, f"field \"{key}\" is missing")
        return record[key]

    def string(self, record: dict, key: str, where: str) -> str:
        value = self.field(record, key, where)
        if not isinstance(value, str):
            self.fail(where, f"\"{key}\" must be a string, got {value!r:.40}")
        return value

    def integer(self, record: dict, key: str, where: str, default: int | None = None) -> int:
        """An int field (``default`` when absent, if given)."""
        value = record.get(key, default) if default is not None else \
            self.field(record, key, where)
        if not _is_int(value):
            self.fail(where, f"\"{key}\" must be an integer, got {value!r:.40}")
        return value

    def items(self, record: dict, key: str, where: str = "graph") -> list:
        value = self.field(record, key, where)
        if not isinstance(value, list):
            self.fail(where, f"\"{key}\" must be a list, got {type(value).__name__}")
        return value

    def string_list(self, record: dict, key: str, where: str) -> list[str]:
        value = self.field(record, key, where)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(where, f"\"{key}\" must be a list of strings, got {value!r:.60}")
        return value

    def shape(self, record: dict, key: str, where: str, unknown: bool = True,
              signed: bool = False) -> list:
        """A list of non-negative ints (``null`` for an unknown dim when ``unknown``; any int
        when ``signed``, for formats that never checked the sign)."""
        shape = self.field(record, key, where)
        if not isinstance(shape, list) or not all(
                (d is None and unknown) or (_is_int(d) and (signed or d >= 0)) for d in shape):
            allowed = ("ints" if signed else "non-negative ints") + (" or nulls" if unknown
                                                                     else "")
            self.fail(where, f"\"{key}\" must be a list of {allowed}, got {shape!r:.60}")
        return shape

    def dtype(self, record: dict, key: str, where: str, kinds: str | None = None) -> np.dtype:
        """A NumPy dtype named by a string field (of one of ``kinds``, when given)."""
        name = self.string(record, key, where)
        try:
            parsed = np.dtype(name)
        except TypeError:
            self.fail(where, f"unknown dtype {name!r}")
        if kinds is not None and parsed.kind not in kinds:
            self.fail(where, f"dtype {name!r} is not a number or bool type")
        return parsed

    def value(self, record: dict, key: str, where: str) -> Any:
        """A field holding a ``json_values`` value, decoded (tensor values become arrays)."""
        raw = self.field(record, key, where)
        try:
            return decode_value(raw)
        except SerializationError as exc:
            self.fail(f"{where}: \"{key}\"", str(exc))

    def attrs(self, record: dict, where: str) -> dict[str, Any]:
        """A node's decoded ``"attrs"`` (empty when absent); tensor values become arrays."""
        attrs = self.object(record.get("attrs", {}), f"{where}: \"attrs\"")
        decoded = {}
        for key, value in attrs.items():
            try:
                decoded[key] = decode_value(value)
            except SerializationError as exc:
                self.fail(f"{where}: attribute {key!r}", str(exc))
        return decoded


def parse_json(text: str | bytes, source: str, what: str = "") -> Any:
    """Decoded JSON, or a SerializationError naming ``source`` (and ``what`` was parsed).

    Example:
        >>> parse_json("[1]", "a.json")
        [1]
    """
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:  # (JSONDecodeError and UnicodeDecodeError too)
        subject = f"{what} is not" if what else "not"
        raise SerializationError(f"{source}: {subject} valid JSON: {exc}") from exc


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
