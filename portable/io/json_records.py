"""Reading and writing the records of portable's JSON graph documents: the parts the IR graph
format (``portable.io.graph_json``) and the symbol format (``portable.symbol.serialize``) share.

Both documents are a format tag and version, then a list of node records, each an op, a name
and attributes (values through ``portable.io.json_values``). This module parses the text,
checks the tag and version, encodes and decodes attribute dicts, and reads typed fields; every
failure is a SerializationError naming the source and where in the document it is
(``model.json: node 'conv': field "op" is missing``).

``parse_json`` here is the one JSON parser of every loader (these documents, safetensors headers,
deployment metadata): it bounds nesting and refuses keys given twice and lone surrogates, so no
loader meets a RecursionError or an ambiguous document; dtypes and shapes are read through
``portable.dtypes`` (a table of names; Python-int element counts within fixed limits).

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
import re
from typing import Any, Mapping, NoReturn

import numpy as np

from portable.dtypes import FILE_DTYPES, dtype_named, shape_problem
from portable.errors import SerializationError
from portable.io.json_values import decode_value, encode_value

# Lists and objects nested deeper than this are refused: no document portable writes comes
# near it, and code that walks decoded values recursively stays far from Python's limit.
MAX_DEPTH = 100


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
              minimum: int = 0) -> list:
        """A list of ints in ``[minimum, 2**62)`` holding at most ``MAX_ELEMENTS`` elements
        (``null`` for an unknown dim when ``unknown``; ``minimum=-1`` for formats where -1
        means unknown)."""
        shape = self.field(record, key, where)
        problem = shape_problem(shape, unknown=unknown, minimum=minimum)
        if problem is not None:
            allowed = ("non-negative ints" if minimum == 0 else f"ints >= {minimum}") + \
                (" or nulls" if unknown else "")
            self.fail(where, f"\"{key}\" must be a list of {allowed}; this one {problem}: "
                             f"{shape!r:.60}")
        return shape

    def dtype(self, record: dict, key: str, where: str, kinds: str | None = None) -> np.dtype:
        """The dtype named by a string field: one of ``FILE_DTYPES`` (of one of ``kinds``, when
        given); nothing else reaches ``np.dtype``, which parses far more than names."""
        name = self.string(record, key, where)
        parsed = dtype_named(name)
        if parsed is None:
            self.fail(where, f"unknown dtype {name!r:.40}: not a number or bool type portable "
                             f"reads ({', '.join(FILE_DTYPES)})")
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
    """Decoded JSON, or a SerializationError naming ``source`` (and ``what`` was parsed): the
    one JSON parser of every loader.

    Beyond syntax it refuses what no file portable writes holds and what would break the code
    reading the result: nesting deeper than ``MAX_DEPTH`` (``[[[[...`` would otherwise escape as
    RecursionError, here or in a recursive reader further on), an object holding a key twice
    (parsers disagree on which one wins, so two readers could see two different files) and a
    string holding a lone surrogate (``"\\ud800"`` is valid JSON but no text: encoding it, as
    writing a name to ONNX or hashing it does, fails). Bytes must be UTF-8.

    Example:
        >>> parse_json("[1]", "a.json")
        [1]
        >>> parse_json("[" * 100000, "a.json")
        Traceback (most recent call last):
        ...
        portable.errors.SerializationError: a.json: not valid JSON: nested more than 100 deep
    """
    subject = f"{source}: {what} is not" if what else f"{source}: not"
    try:
        if isinstance(text, (bytes, bytearray, memoryview)):
            text = bytes(text).decode("utf-8")  # (json.loads would also guess UTF-16 and -32)
        value = json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:  # (the C scanner stops cleanly at the interpreter's limit)
        raise SerializationError(f"{subject} valid JSON: nested more than {MAX_DEPTH} "
                                 f"deep") from None
    except (TypeError, ValueError) as exc:  # (JSONDecodeError and UnicodeDecodeError too)
        raise SerializationError(f"{subject} valid JSON: {exc}") from exc
    problem = _tree_problem(value, MAX_DEPTH, strings=_may_hold_surrogates(text))
    if problem is not None:
        raise SerializationError(f"{subject} valid JSON: {problem}")
    return value


def check_written(text: str, what: str) -> None:
    """Refuse JSON text a writer made that ``parse_json`` would refuse for holding a lone
    surrogate (``json.dumps`` escapes one as ``"\\ud800"`` without complaint), so that portable
    never writes a file that it cannot read back. Cheap when there is none: a text search.

    Args:
        text: the JSON text written.
        what: what it is, for the message (``"the graph of model.portable"``).

    Raises:
        SerializationError: naming ``what`` and the string at fault.
    """
    if _SURROGATE_ESCAPE.search(text):
        problem = _tree_problem(json.loads(text), MAX_DEPTH * 100, strings=True)
        if problem is not None:
            raise SerializationError(f"cannot write {what}: {problem}")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"key {twice!r:.60} appears twice in one object")
    return result


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _may_hold_surrogates(text: str) -> bool:
    """Whether a string decoded from ``text`` may hold a lone surrogate: only an escape
    (``\\udc00``) or a surrogate already in ``text`` (a str from a caller) can make one."""
    if _SURROGATE_ESCAPE.search(text):
        return True
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _tree_problem(value: Any, limit: int, strings: bool) -> str | None:
    """What is wrong with a decoded document: lists and objects nested more than ``limit``
    deep, or (when ``strings``) a key or string that is not valid Unicode. Iterative: the
    check itself must not recurse."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
            if strings:
                stack.extend((key, depth) for key in item)
        elif isinstance(item, list):
            children = item
        else:
            if strings and isinstance(item, str) and not _encodable(item):
                return f"the string {item!r:.60} holds a lone surrogate (it is not text)"
            continue
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return f"nested more than {limit} deep"
                stack.append((child, depth + 1))
            elif strings and isinstance(child, str):
                stack.append((child, depth))
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
