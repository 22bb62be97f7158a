"""ONNX operator schemas as data, so that ONNX files are imported without the ``onnx``
package (on a phone, say): every version of every op with its attributes (kind and default)
and how many inputs and outputs it takes.

Three domains are described: ai.onnx (ops by their plain name, ``Reshape``) and the standard
side domains in ``EXTRA_DOMAINS`` (ops by their domain-qualified name, ``ai.onnx.ml.Binarizer``,
the name portable declares them under), each with its own opset numbers.

The data (``onnx_schemas.json`` beside this file) is generated from ``onnx.defs`` by
``python -m portable.io.onnx.schemas`` and checked against the installed ``onnx`` by
``tests/exporters/test_wire.py``; regenerate it when onnx adds an opset.

Example:
    >>> op_version("Reshape", 13)
    13
    >>> get("Reshape", 13).attributes["allowzero"].default
    0
"""
from __future__ import annotations

import functools
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from portable.errors import UnknownOpError
from portable.ir.graph import ONNX_EXTRA_DOMAINS

SNAPSHOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx_schemas.json")

# The standard ONNX domains besides ai.onnx whose schemas the snapshot holds (ops keyed by
# "<domain>.<op>"); other domains (vendors', portable's private one) are never read from files.
EXTRA_DOMAINS = ONNX_EXTRA_DOMAINS

# AttributeProto type codes -> the kinds portable's attribute values have (None: unsupported)
ATTRIBUTE_KINDS = {1: "float", 2: "int", 3: "string", 4: "tensor", 6: "floats", 7: "ints",
                   8: "strings"}


@dataclass(frozen=True)
class AttributeSchema:
    """An attribute of one op version: its kind (``float``, ``ints``..., or the ONNX type name
    in lower case for kinds portable does not read, such as ``graph``) and default (None when
    it is required or its default is a tensor)."""

    kind: str
    default: Any


@dataclass(frozen=True)
class OpSchema:
    """One version of an op (``name`` domain-qualified outside ai.onnx); ``max_inputs`` and
    ``max_outputs`` are inf when variadic."""

    name: str
    since_version: int
    attributes: dict[str, AttributeSchema]
    max_inputs: float
    max_outputs: float


@functools.lru_cache(maxsize=None)
def _snapshot() -> dict:
    with open(SNAPSHOT, encoding="utf-8") as handle:
        return json.load(handle)


def newest_opset(domain: str = "") -> int:
    """The newest opset of ``domain`` (``""``: ai.onnx) the snapshot describes.

    Raises:
        UnknownOpError: ``domain`` is not ai.onnx or one of ``EXTRA_DOMAINS``.
    """
    if domain in ("", "ai.onnx"):
        return int(_snapshot()["newest_opset"])
    newest = _snapshot().get("domains", {}).get(domain)
    if newest is None:
        raise UnknownOpError(f"domain {domain!r} is not one whose schemas portable knows "
                             f"(ai.onnx, {', '.join(EXTRA_DOMAINS)})")
    return int(newest)


def qualified(domain: str, op_type: str) -> str:
    """The snapshot's (and portable's) name of ``op_type`` of ``domain``: plain for ai.onnx,
    ``"<domain>.<op_type>"`` otherwise."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}.{op_type}"


def onnx_version() -> str:
    """The version of the onnx package the snapshot was made from."""
    return str(_snapshot()["onnx_version"])


@functools.lru_cache(maxsize=None)
def op_version(op: str, opset: int) -> int | None:
    """The version of op ``op`` (domain-qualified outside ai.onnx) that ``opset`` of its
    domain means, or None if it has none."""
    found = [v for v in _snapshot()["versions"].get(op, ()) if v <= opset]
    return max(found) if found else None


def first_version(op: str) -> int | None:
    """The opset (of its domain) in which op ``op`` first appears (None: no such op)."""
    found = _snapshot()["versions"].get(op)
    return min(found) if found else None


@functools.lru_cache(maxsize=None)
def get(op: str, version: int) -> OpSchema:
    """The schema of version ``version`` (a since-version) of op ``op``."""
    record = _snapshot()["schemas"].get(op, {}).get(str(version))
    if record is None:
        raise UnknownOpError(f"op {op!r} has no version {version} (known versions: "
                             f"{_snapshot()['versions'].get(op, [])})")
    inf = float("inf")
    return OpSchema(
        op, version,
        {name: AttributeSchema(kind, default) for name, (kind, default)
         in record["attributes"].items()},
        inf if record["max_inputs"] is None else record["max_inputs"],
        inf if record["max_outputs"] is None else record["max_outputs"])


# -- making the snapshot (needs onnx) ---------------------------------------------------------


def build_snapshot() -> dict:
    """The snapshot of the installed ``onnx`` package's schemas of ai.onnx and
    ``EXTRA_DOMAINS``."""
    import onnx
    from onnx import defs, helper

    variadic = defs.OpSchema.FormalParameterOption.Variadic
    kinds = {int(code): name.lower() for name, code in onnx.AttributeProto.AttributeType.items()}
    kinds.update(ATTRIBUTE_KINDS)

    def arity(formals: Any) -> int | None:
        return None if formals and formals[-1].option == variadic else len(formals)

    def default(attr: Any) -> Any:
        if not attr.default_value.name or attr.type == onnx.AttributeProto.TENSOR:
            return None
        value = helper.get_attribute_value(attr.default_value)
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, list):
            return [v.decode() if isinstance(v, bytes) else v for v in value]
        return value

    versions: dict[str, list[int]] = {}
    schemas: dict[str, dict[str, Any]] = {}
    for schema in defs.get_all_schemas_with_history():
        if schema.domain not in ("", "ai.onnx") + EXTRA_DOMAINS:
            continue
        name = qualified(schema.domain, schema.name)
        versions.setdefault(name, []).append(int(schema.since_version))
        schemas.setdefault(name, {})[str(schema.since_version)] = {
            "attributes": {name: [kinds.get(int(attr.type), str(attr.type)), default(attr)]
                           for name, attr in sorted(schema.attributes.items())},
            "max_inputs": arity(schema.inputs), "max_outputs": arity(schema.outputs)}
    # (by the op's own domain: ai.onnx.preview is a prefix of ai.onnx.preview.training)
    newest = {domain: max(v for op, found in versions.items()
                          if op.rsplit(".", 1)[0] == domain for v in found)
              for domain in EXTRA_DOMAINS}
    # (a domain's newest opset is the newest since-version of its ops: onnx's version map says
    # ai.onnx.ml 5, the newest TreeEnsemble, and ai.onnx.preview.training 1)
    return {"onnx_version": onnx.__version__, "newest_opset": defs.onnx_opset_version(),
            "domains": newest,
            "versions": {op: sorted(set(v)) for op, v in sorted(versions.items())},
            "schemas": {op: dict(sorted(s.items(), key=lambda kv: int(kv[0])))
                        for op, s in sorted(schemas.items())}}


def main() -> int:
    from portable.io.atomic import atomic_write_text

    snapshot = build_snapshot()
    atomic_write_text(SNAPSHOT, json.dumps(snapshot, indent=0, sort_keys=False) + "\n")
    print(f"wrote {SNAPSHOT}: {len(snapshot['versions'])} ops, opsets up to "
          f"{snapshot['newest_opset']} (onnx {snapshot['onnx_version']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
