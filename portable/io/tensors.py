r"""Named tensors on disk and in byte blobs: the one reader and writer of safetensors files.

Every tensor file portable writes (parameters, checkpoints, optimizer states, deployment files)
is a safetensors file, written and read here with NumPy and the standard library alone:

    8 bytes       N, the header length (unsigned little-endian)
    N bytes       the header, JSON, padded with spaces so that the tensor bytes start 8-aligned:
                  {"__metadata__": {"key": "value", ...},            # strings only
                   "w": {"dtype": "F32", "shape": [10, 84], "data_offsets": [0, 3360]}, ...}
    the rest      the tensors' bytes, little-endian, back to back, larger items first so every
                  tensor is aligned to its item size (as safetensors' own writer orders them)

Two layers:

* **The container** (``write_tensor_file`` / ``tensor_file_bytes``, ``read_tensor_file`` /
  ``parse_tensor_bytes``): arrays plus string metadata. Writes stream through
  ``portable.io.atomic`` (the arrays are never copied into one buffer); reads check the header
  length and every entry (dtype, shape, offsets within the data, no overlap) before making an
  array, and either map the file read-only (each tensor a view, nothing copied) or copy the
  tensors into writable arrays. Every failure is a SerializationError naming the source.
* **Verified tensor files** (``save_tensors`` / ``load_tensors``, ``tensors_to_bytes`` /
  ``tensors_from_bytes``): the container with a JSON metadata object and a SHA-256 digest of
  the tensors in its header (format ``portable.tensors``), which checkpoints, optimizer states
  and rank-to-rank transfers use. A truncated or corrupted file is refused; no pickle: loading
  reads numbers, never code.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
    >>> save_tensors(path, {"w": np.ones(3, np.float32)}, {"note": "demo"})
    >>> tensors, meta = load_tensors(path)
    >>> tensors["w"].tolist(), meta["note"]
    ([1.0, 1.0, 1.0], 'demo')
"""
from __future__ import annotations

import hashlib
import io
import json
import mmap
import os
from dataclasses import dataclass
from typing import Any, BinaryIO, Mapping

import numpy as np

from portable.dtypes import element_count, shape_problem
from portable.errors import SerializationError
from portable.io.atomic import atomic_writer
from portable.io.files import open_regular
from portable.io.json_records import parse_json

# safetensors refuses headers larger than this; so do we, for both reading and writing.
MAX_HEADER_BYTES = 100_000_000
METADATA_KEY = "__metadata__"
# The smallest valid file: the length, then "{}".
_MIN_BYTES = 10

# safetensors dtype names <-> NumPy dtypes (little-endian, as the format stores them).
DTYPES = {"BOOL": np.dtype("bool"), "U8": np.dtype("uint8"), "I8": np.dtype("int8"),
          "U16": np.dtype("<u2"), "I16": np.dtype("<i2"), "F16": np.dtype("<f2"),
          "U32": np.dtype("<u4"), "I32": np.dtype("<i4"), "F32": np.dtype("<f4"),
          "U64": np.dtype("<u8"), "I64": np.dtype("<i8"), "F64": np.dtype("<f8"),
          "C64": np.dtype("<c8")}
_CODES = {dtype.newbyteorder("="): code for code, dtype in DTYPES.items()}
# Element kinds a file may store: every kind above, or (for formats whose graphs type their
# tensors as numbers) bool, ints and floats only.
ALL_KINDS = "biufc"
NUMERIC_KINDS = "biuf"

TENSOR_FORMAT = "portable.tensors"
TENSOR_VERSION = "1"


@dataclass(frozen=True)
class TensorFile:
    """What a tensor file holds, as read by ``read_tensor_file`` or ``parse_tensor_bytes``.

    Attributes:
        tensors: name -> array, in file order (read-only views of the mapped file, or writable
            copies).
        metadata: the header's ``__metadata__`` (string -> string; empty when absent).
        spans: name -> ``(begin, end)``, the tensor's bytes as offsets into the whole file.
        header_bytes: the length of the JSON header (padding included).
        size: the file's size in bytes.
    """

    tensors: dict[str, np.ndarray]
    metadata: dict[str, str]
    spans: dict[str, tuple[int, int]]
    header_bytes: int
    size: int


# -- writing -----------------------------------------------------------------------------------


def write_tensor_file(path: str | os.PathLike, tensors: Mapping[str, Any],
                      metadata: Mapping[str, str] | None = None, *, kinds: str = ALL_KINDS
                      ) -> dict[str, Any]:
    """Write named arrays and string metadata to ``path`` as safetensors, atomically.

    The arrays are streamed to a temporary file beside ``path`` (never joined in memory) that
    replaces ``path`` only once it is complete.

    Args:
        path: the file to write (its folder is created).
        tensors: name -> array (anything ``np.asarray`` accepts; NDArrays via ``asnumpy``).
        metadata: string -> string entries for the header's ``__metadata__``.
        kinds: the dtype kinds the caller's format allows (``NUMERIC_KINDS`` refuses complex).

    Returns:
        ``{"path", "tensors", "tensor_bytes", "bytes"}`` of the file written.

    Raises:
        SerializationError: a tensor has a dtype the format cannot store, a name or metadata
            value is not allowed, the header is too large, or the file cannot be written
            (names the file and tensor).

    Example:
        >>> write_tensor_file("w.safetensors", {"w": np.zeros(2)})    # doctest: +SKIP
        {'path': 'w.safetensors', 'tensors': 1, 'tensor_bytes': 16, 'bytes': 96}
    """
    header, arrays, tensor_bytes = _layout(tensors, metadata, os.fspath(path), kinds)
    try:
        with atomic_writer(path) as handle:
            _write(handle, header, arrays)
    except OSError as exc:  # (the old file, if any, is left as it was)
        raise SerializationError(f"cannot write {path}: {exc}") from exc
    return {"path": os.fspath(path), "tensors": len(arrays), "tensor_bytes": tensor_bytes,
            "bytes": 8 + len(header) + tensor_bytes}


def tensor_file_bytes(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None,
                      *, kinds: str = ALL_KINDS) -> bytes:
    """The bytes ``write_tensor_file`` would write, for a blob sent or embedded elsewhere.

    Example:
        >>> parse_tensor_bytes(tensor_file_bytes({"a": np.arange(2)})).tensors["a"].tolist()
        [0, 1]
    """
    header, arrays, _ = _layout(tensors, metadata, "<bytes>", kinds)
    buffer = io.BytesIO()
    _write(buffer, header, arrays)
    return buffer.getvalue()


def _layout(tensors: Mapping[str, Any], metadata: Mapping[str, str] | None, source: str,
            kinds: str) -> tuple[bytes, list[np.ndarray], int]:
    """The padded header, the arrays in file order and their total bytes."""
    arrays = {str(name): storable(str(name), value, kinds=kinds, source=source)
              for name, value in tensors.items()}
    if METADATA_KEY in arrays:
        raise SerializationError(f"{source}: a tensor may not be named {METADATA_KEY!r}")
    meta = dict(metadata or {})
    odd = [key for key, value in meta.items() if not (isinstance(key, str)
                                                      and isinstance(value, str))]
    if odd:
        raise SerializationError(f"{source}: metadata entries {odd[:5]} are not string -> "
                                 f"string (safetensors stores strings only)")
    order = sorted(arrays, key=lambda name: (-arrays[name].dtype.itemsize, name))
    entries, offset = {}, 0
    for name in order:
        array = arrays[name]
        entries[name] = {"dtype": _CODES[array.dtype.newbyteorder("=")],
                         "shape": list(array.shape),
                         "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    header = json.dumps({METADATA_KEY: meta, **entries}, separators=(",", ":"),
                        allow_nan=False).encode("utf-8")
    header += b" " * (-len(header) % 8)
    if len(header) > MAX_HEADER_BYTES:
        raise SerializationError(f"{source}: the header would take {len(header)} bytes, more than "
                                 f"the {MAX_HEADER_BYTES} safetensors allows (large attribute "
                                 f"tensors belong in initializers)")
    return header, [arrays[name] for name in order], offset


def storable(name: str, value: Any, *, kinds: str = ALL_KINDS, source: str = "") -> np.ndarray:
    """``value`` as a tensor file stores it: a C-contiguous little-endian array (``value``
    itself when it already is one).

    Args:
        name: the tensor's name, for messages.
        value: an array (NDArrays via ``asnumpy``).
        kinds: the dtype kinds allowed.
        source: the file it is for, for messages.

    Raises:
        SerializationError: the dtype cannot be stored (names the tensor and what can be).

    Example:
        >>> storable("w", np.arange(2, dtype=">i4")).dtype.str
        '<i4'
    """
    array = value.asnumpy() if hasattr(value, "asnumpy") else np.asarray(value)
    if array.dtype.newbyteorder("=") not in _CODES or array.dtype.kind not in kinds:
        stored = sorted(d.name for d in _CODES if d.kind in kinds)
        where = f"{source}: " if source else ""
        raise SerializationError(f"{where}tensor {name!r} has dtype {array.dtype}, which this "
                                 f"file cannot store (it stores {', '.join(stored)})")
    little = array.dtype.newbyteorder("<") if array.dtype.byteorder != "|" else array.dtype
    return np.require(array.astype(little, copy=False), requirements="C")  # keeps 0-d as 0-d


def raw_bytes(array: np.ndarray) -> np.ndarray:
    """The bytes of a ``storable`` array as a flat uint8 view (no copy; works for 0-d and bool
    arrays), for writing or checksumming."""
    return array.reshape(-1).view(np.uint8)


def _write(handle: BinaryIO, header: bytes, arrays: list[np.ndarray]) -> None:
    handle.write(len(header).to_bytes(8, "little"))
    handle.write(header)
    for array in arrays:
        handle.write(raw_bytes(array))


# -- reading -----------------------------------------------------------------------------------


def looks_like_tensor_file(first_bytes: bytes) -> bool:
    """Whether a file starting with ``first_bytes`` may be a safetensors file: a plausible
    header length, then a JSON object.

    Args:
        first_bytes: the file's first bytes (at least 10; 64 are plenty).

    Example:
        >>> looks_like_tensor_file(b"\\x08\\x07\\x12\\x07pytorch")   # an ONNX model's first bytes
        False
    """
    if len(first_bytes) < _MIN_BYTES:
        return False
    length = int.from_bytes(first_bytes[:8], "little")
    return 2 <= length <= MAX_HEADER_BYTES and first_bytes[8:9] == b"{" and \
        first_bytes[9:10] in (b'"', b"}", b" ", b"\n")


def read_tensor_file(path: str | os.PathLike, *, writable: bool = False,
                     what: str = "tensor file") -> TensorFile:
    """Read a safetensors file, checking its header before any tensor is made.

    Args:
        path: the file.
        writable: copy each tensor into a writable array; otherwise the file is mapped
            read-only and each tensor is a read-only view of the mapping (pages are read when
            first touched, and the file is never written).
        what: what the file should be, for messages (``"deployment file"``).

    Returns:
        The tensors, metadata and layout of the file.

    Raises:
        SerializationError: the file is missing, unreadable, truncated or malformed; the
            message names the file (and the tensor at fault).

    Example:
        >>> read_tensor_file("w.safetensors").tensors["w"].flags.writeable  # doctest: +SKIP
        False
    """
    source = os.fspath(path)
    try:
        with open_regular(source, what) as (handle, size):
            length = _header_length(handle.read(8), size, source, what)
            raw = handle.read(length)
            start = 8 + length
            # Nothing to map when the file holds no tensor bytes (mmap refuses length 0).
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) \
                if size > start else b""
    except (OSError, ValueError) as exc:
        raise SerializationError(f"cannot read {what} {source}: {exc}") from exc
    return _tensor_file(raw, data, start, size, source, what, writable)


def parse_tensor_bytes(data: bytes, source: str = "<bytes>", *, writable: bool = True,
                       what: str = "tensor file") -> TensorFile:
    """Parse safetensors bytes (``tensor_file_bytes``' output), checking them as
    ``read_tensor_file`` does.

    Args:
        data: the whole file's bytes.
        source: where they came from, for messages.
        writable: copy each tensor (otherwise the arrays are read-only views of ``data``).
        what: what the bytes should be, for messages.

    Example:
        >>> blob = tensor_file_bytes({"w": np.ones(2, np.float32)}, {"k": "v"})
        >>> parse_tensor_bytes(blob).metadata
        {'k': 'v'}
    """
    length = _header_length(bytes(data[:8]), len(data), source, what)
    start = 8 + length
    return _tensor_file(bytes(data[8:start]), data, start, len(data), source, what, writable)


def _header_length(first: bytes, size: int, source: str, what: str) -> int:
    if size < _MIN_BYTES:
        raise SerializationError(f"{source}: truncated: too short to be a {what} ({size} bytes)")
    length = int.from_bytes(first, "little")
    if length < 2 or length > MAX_HEADER_BYTES:
        raise SerializationError(f"{source}: not a {what}: its header length {length} is absurd")
    if length > size - 8:
        raise SerializationError(f"{source}: truncated: the header needs {length} bytes but the "
                                 f"file has {size - 8} after the length")
    return length


def _tensor_file(raw: bytes, data: Any, start: int, size: int, source: str, what: str,
                 writable: bool) -> TensorFile:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(f"{source}: not a readable {what}: the header is not valid "
                                 f"JSON (not UTF-8 text: {exc})") from exc
    # (parse_json refuses deep nesting and keys given twice, as safetensors does)
    header = parse_json(text, source, f"not a readable {what}: the header")
    if not isinstance(header, dict):
        raise SerializationError(f"{source}: the header is not a JSON object")
    meta = header.pop(METADATA_KEY, None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise SerializationError(f"{source}: the header's {METADATA_KEY!r} is not an object of "
                                 f"strings")
    spans = _spans(header, size - start, source)
    tensors, where = {}, {}
    for begin, end, name, dtype, shape in spans:
        if end == begin:
            array = np.empty(shape, dtype)
        else:
            array = np.frombuffer(data, dtype, (end - begin) // dtype.itemsize,
                                  start + begin).reshape(shape)
        if writable:
            array = array.copy()  # its own memory: the caller may update it in place
        array.setflags(write=writable)
        tensors[name] = array
        where[name] = (start + begin, start + end)
    return TensorFile(tensors, meta, where, start - 8, size)


def _spans(header: dict, available: int, source: str) -> list[tuple]:
    """Check every tensor entry; ``(begin, end, name, dtype, shape)`` sorted by offset."""
    spans = []
    for name, entry in header.items():
        where = f"{source}: tensor {name!r}"
        if not isinstance(entry, dict):
            raise SerializationError(f"{where}: its entry is not a JSON object")
        code = entry.get("dtype")
        dtype = DTYPES.get(code) if isinstance(code, str) else None
        if dtype is None:
            raise SerializationError(f"{where}: unknown dtype {code!r:.40} (this portable reads "
                                     f"{', '.join(DTYPES)})")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        problem = shape_problem(shape)
        if problem is not None:
            raise SerializationError(f"{where}: shape {shape!r:.60} is not a list of "
                                     f"non-negative ints within portable's limits (it "
                                     f"{problem})")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_count, offsets)):
            raise SerializationError(f"{where}: data_offsets {offsets!r:.60} is not a pair of "
                                     f"non-negative ints")
        begin, end = offsets
        if not begin <= end <= available:
            raise SerializationError(f"{where}: data_offsets [{begin}, {end}] lie outside the "
                                     f"{available} bytes of tensor data (truncated file?)")
        nbytes = element_count(shape) * dtype.itemsize  # Python ints: no int64 wrap-around
        if nbytes != end - begin:
            raise SerializationError(f"{where}: shape {shape} of {code} needs {nbytes} "
                                     f"bytes but data_offsets [{begin}, {end}] hold "
                                     f"{end - begin}")
        spans.append((begin, end, name, dtype, tuple(shape)))
    spans.sort(key=lambda span: span[:3])
    for before, after in zip(spans, spans[1:]):
        if after[0] < before[1]:
            raise SerializationError(f"{source}: tensors {before[2]!r} and {after[2]!r} "
                                     f"overlap (bytes {after[0]} to {before[1]})")
    return spans


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# -- verified tensor files (format "portable.tensors") -----------------------------------------


def _digest(tensors: Mapping[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        array = np.ascontiguousarray(tensors[name])  # 0-d counts as 1-d, as it always has
        digest.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(raw_bytes(array))
    return digest.hexdigest()


def _verified(tensors: Mapping[str, Any], metadata: dict | None
              ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The arrays as stored and the header entries recording their digest and ``metadata``."""
    # Digest the arrays as the file stores them (little-endian), so the reader's digest agrees.
    # ascontiguousarray stores a 0-d array as shape (1,): these files always have, and readers
    # of older versions recompute the digest that way.
    arrays = {str(k): storable(str(k), np.ascontiguousarray(v)) for k, v in tensors.items()}
    try:
        text = json.dumps(metadata or {})
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"tensor file metadata is not JSON-able: {exc}") from exc
    return arrays, {"format": TENSOR_FORMAT, "version": TENSOR_VERSION,
                    "sha256": _digest(arrays), "json": text}


def tensors_to_bytes(tensors: Mapping[str, Any], metadata: dict | None = None) -> bytes:
    """Serialise named arrays and JSON metadata into verified tensor-file bytes.

    Example:
        >>> tensors_from_bytes(tensors_to_bytes({}, {"step": 3}))
        ({}, {'step': 3})
    """
    return tensor_file_bytes(*_verified(tensors, metadata))


def tensors_from_bytes(data: bytes, source: str = "<bytes>"
                       ) -> tuple[dict[str, np.ndarray], dict]:
    """Parse and verify bytes written by ``tensors_to_bytes`` (writable arrays).

    Returns:
        ``(tensors, metadata)``.

    Raises:
        SerializationError: naming ``source`` when the data is truncated, corrupted, not a
            portable tensor file, or fails its digest.
    """
    return _checked(parse_tensor_bytes(data, source), source)


def save_tensors(path: str | os.PathLike, tensors: Mapping[str, Any],
                 metadata: dict | None = None) -> None:
    """Write named arrays and JSON metadata to ``path`` atomically, with their digest.

    Args:
        path: the file to write (its folder is created).
        tensors: name -> NumPy array.
        metadata: JSON-serialisable data stored in the file's header.
    """
    write_tensor_file(path, *_verified(tensors, metadata))


def load_tensors(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """Read and verify a file written by ``save_tensors`` (writable arrays).

    Returns:
        ``(tensors, metadata)``.

    Raises:
        SerializationError: when the file is missing, truncated or corrupted (names the file).
    """
    return _checked(read_tensor_file(path, writable=True), os.fspath(path))


def _checked(found: TensorFile, source: str) -> tuple[dict[str, np.ndarray], dict]:
    meta = found.metadata
    if meta.get("format") != TENSOR_FORMAT:
        raise SerializationError(f"{source}: a safetensors file, but not one written by "
                                 f"portable (format {meta.get('format')!r})")
    if _digest(found.tensors) != meta.get("sha256"):
        raise SerializationError(f"{source}: corrupted: the tensor data does not match the "
                                 f"digest stored in its header")
    metadata = parse_json(meta.get("json", "{}"), source, "its metadata")
    if not isinstance(metadata, dict):
        raise SerializationError(f"{source}: its metadata is a JSON {type(metadata).__name__}, "
                                 f"not an object")
    return found.tensors, metadata
