"""Property tests of the model readers against generated hostile input (issue 21 item 5): random
safetensors headers (objects of offsets, shapes and dtypes), mutated deployment graph and symbol
documents, byte-level mutations of an ONNX model built with ``onnx.helper``, and random deep and
wide JSON. Whatever comes in, a reader either returns or raises one of portable's errors
(``PortableError``): never RecursionError, OverflowError, a NumPy error or a KeyError.

Each test is bounded (200 examples, no deadline) and derandomized, so the file runs in well
under a minute on two CPUs and a failure reproduces; set ``PORTABLE_FUZZ_EXAMPLES`` to search
longer with fresh examples (``PORTABLE_FUZZ_EXAMPLES=5000 pytest tests/io/test_hostile_fuzz.py``).
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="property tests need hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from portable.errors import PortableError  # noqa: E402
from portable.io import tensors  # noqa: E402
from portable.io.graph_json import graph_from_dict  # noqa: E402
from portable.io.json_records import MAX_DEPTH, parse_json  # noqa: E402
from portable.predict import deployment  # noqa: E402
from portable.symbol import fromjson  # noqa: E402
from tests.io.hostile_files import (WEIGHTS, deployment_bytes, graph_doc, onnx_model,  # noqa: E402
                                    safetensors_bytes, symbol_doc, tensor_layout)

# A longer search (the variable set) draws new examples each run; the default run is fixed.
SEARCH = os.environ.get("PORTABLE_FUZZ_EXAMPLES")
MAX_EXAMPLES = int(SEARCH or 200)
BOUNDED = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=not SEARCH,
                   database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# -- strategies -----------------------------------------------------------------------------------

# Numbers at the edges readers get wrong: int32/int64/uint64 limits, 2**62, negatives.
EDGE_INTS = st.sampled_from([0, 1, -1, 2, 7, 2**31, 2**32, 2**40, 2**40 + 1, 2**62, 2**63 - 1,
                             2**63, 2**64, 2**64 + 24, -2**63, 10**30])
INTS = st.one_of(st.integers(-3, 40), EDGE_INTS)
TEXT = st.one_of(st.text(max_size=8), st.sampled_from(["\ud800", "a\udfffb", "\x00", "..",
                                                       "__tensor__", "__metadata__"]))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, st.floats(), TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=12)
# Text without lone surrogates, for JSON whose parse must succeed.
CLEAN_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)
CLEAN_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
              st.floats(allow_nan=False), CLEAN_TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(CLEAN_TEXT, inner, max_size=4)), max_leaves=12)


def _only_our_errors(call, *args: Any, **kwargs: Any) -> Any:
    """``call(*args)``'s result, or None when it raised a PortableError; any other exception
    fails the test (it propagates)."""
    try:
        return call(*args, **kwargs)
    except PortableError:
        return None


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to an item of a JSON document (lists by index, objects by key)."""
    found = [prefix] if prefix else []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) \
        if isinstance(doc, list) else ()
    for key, value in items:
        found += _paths(value, prefix + (key,))
    return found


def _mutate(doc: Any, data: st.DataObject, steps: int = 3) -> Any:
    """``doc`` with up to ``steps`` items replaced by random JSON or dropped."""
    doc = json.loads(json.dumps(doc))
    for _ in range(data.draw(st.integers(1, steps))):
        paths = _paths(doc)
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()):
            parent[path[-1]] = data.draw(JSON)
        elif isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent.pop(path[-1])
    return doc


# -- safetensors headers --------------------------------------------------------------------------

DTYPE_CODES = st.one_of(st.sampled_from(list(tensors.DTYPES) + ["F8", "BF16", "f32", "", "O"]),
                        JSON)
SHAPES = st.one_of(st.lists(INTS, max_size=4), st.lists(st.integers(0, 4), max_size=3),
                   st.lists(st.integers(0, 1), min_size=30, max_size=70), JSON)  # (ranks too)
OFFSETS = st.one_of(st.lists(INTS, min_size=2, max_size=2),
                    st.tuples(st.integers(0, 64), st.integers(0, 64)).map(sorted), JSON)
ENTRIES = st.one_of(st.fixed_dictionaries({"dtype": DTYPE_CODES, "shape": SHAPES,
                                           "data_offsets": OFFSETS}), JSON)
METADATA = st.one_of(st.dictionaries(TEXT, TEXT, max_size=3), JSON)


@BOUNDED
@given(entries=st.dictionaries(TEXT, ENTRIES, max_size=4), metadata=st.none() | METADATA,
       body=st.binary(max_size=64), writable=st.booleans())
def test_random_safetensors_headers_fail_only_with_our_errors(entries, metadata, body, writable):
    header = dict(entries)
    if metadata is not None:
        header["__metadata__"] = metadata
    found = _only_our_errors(tensors.parse_tensor_bytes, safetensors_bytes(header, body),
                             writable=writable)
    if found is not None:  # what it returned is what the header said, within the file
        start = 8 + found.header_bytes
        for name, array in found.tensors.items():
            begin, end = found.spans[name]
            assert start <= begin <= end <= found.size and array.nbytes == end - begin
            assert array.dtype in tensors.DTYPES.values()
    _only_our_errors(tensors.tensors_from_bytes, safetensors_bytes(header, body))


@BOUNDED
@given(data=st.data())
def test_mutated_tensor_entries_fail_only_with_our_errors(data):
    entries, body = tensor_layout({**WEIGHTS, "n": np.arange(3, dtype=np.int64)})
    _only_our_errors(tensors.parse_tensor_bytes, safetensors_bytes(_mutate(entries, data), body))


# -- deployment files and symbol documents --------------------------------------------------------


@BOUNDED
@given(data=st.data())
def test_mutated_deployment_graphs_fail_only_with_our_errors(data):
    graph = _mutate(graph_doc(), data)
    edit = None
    if data.draw(st.booleans()):  # the tensor entry too, now and then
        entry = _mutate(tensor_layout(WEIGHTS)[0]["w"], data, steps=1)
        edit = lambda header: header.update({"w": entry})  # noqa: E731
    raw = deployment_bytes(graph, header_edit=edit)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.portable")
        with open(path, "wb") as handle:
            handle.write(raw)
        _only_our_errors(deployment.load, path)
        _only_our_errors(deployment.describe, path)
    _only_our_errors(graph_from_dict, graph, dict(WEIGHTS), "model.json")


@BOUNDED
@given(data=st.data())
def test_mutated_symbol_files_fail_only_with_our_errors(data):
    symbol = _only_our_errors(fromjson, json.dumps(_mutate(symbol_doc(), data)), "s.json")
    if symbol is not None:
        assert symbol.list_outputs()


# -- ONNX protobuf bytes --------------------------------------------------------------------------

MUTATIONS = st.tuples(st.sampled_from(["flip", "set", "truncate", "insert", "delete", "repeat"]),
                      st.integers(0, 1 << 20), st.integers(0, 255), st.binary(max_size=12))


def _mutate_bytes(data: bytes, steps: list[tuple]) -> bytes:
    data = bytearray(data)
    for kind, where, byte, chunk in steps:
        if not data:
            break
        at = where % len(data)
        if kind == "flip":
            data[at] ^= 1 << (byte % 8)
        elif kind == "set":
            data[at] = byte
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = chunk
        elif kind == "delete":
            del data[at:at + 1 + byte % 16]
        else:
            data[at:at] = data[at:at + 1 + byte % 16]
    return bytes(data)


@BOUNDED
@given(steps=st.lists(MUTATIONS, min_size=1, max_size=4))
def test_mutated_onnx_models_fail_only_with_our_errors(steps):
    pytest.importorskip("onnx")
    from portable.io.onnx.importer import import_graph

    _only_our_errors(import_graph, _mutate_bytes(_ONNX_BYTES(), steps))


def _ONNX_BYTES() -> bytes:  # noqa: N802 - a constant, built once
    global _onnx_bytes
    if _onnx_bytes is None:
        _onnx_bytes = onnx_model().SerializeToString()
    return _onnx_bytes


_onnx_bytes: bytes | None = None


# -- deep and wide JSON ---------------------------------------------------------------------------


def _depth(value: Any) -> int:
    """Nesting depth of lists and objects (a scalar is 0), by Python's own reckoning."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@BOUNDED
@given(depth=st.one_of(st.integers(0, MAX_DEPTH + 5), st.integers(0, 200_000)),
       opener=st.sampled_from(["[", '{"k":', '[1,{"a":[']), inner=CLEAN_JSON,
       width=st.integers(0, 20_000), closed=st.booleans())
def test_random_deep_and_wide_json_parses_or_is_refused(depth, opener, inner, width, closed):
    closer = {"[": "]", '{"k":': "}", '[1,{"a":[': "]}]"}[opener]
    wide = "[" + ",".join(["0"] * width) + "]"
    body = "[" + json.dumps(inner) + "," + wide + "]"
    text = opener * depth + body + (closer * depth if closed else "")
    try:
        value = parse_json(text, "doc.json")
    except PortableError:
        value = None
    levels = depth * (opener.count("[") + opener.count("{")) + 1 + max(_depth(inner), 1)
    if closed or depth == 0:  # valid JSON: parsed exactly as Python's parser reads it
        assert value == (json.loads(text) if levels <= MAX_DEPTH else None)
    else:
        assert value is None
    # Every loader goes through the same parser: none lets another exception out.
    _only_our_errors(fromjson, text, "s.json")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.portable")
        with open(path, "wb") as handle:
            handle.write(deployment_bytes(text))
        _only_our_errors(deployment.load, path)
    _only_our_errors(tensors.parse_tensor_bytes, safetensors_bytes(text))
