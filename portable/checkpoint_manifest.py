"""The checkpoint manifest: its file names, its run id, and the check of everything a loader
reads from it.

A manifest is JSON that someone else may have written (or damaged), so ``parse_manifest``
checks every field the checkpoint loader uses before anything trusts it: keys present, types
right, numbers in range, and the names consistent with the file the manifest is. Each failure
is a SerializationError naming the manifest and the key, never a raw KeyError or TypeError, so
``CheckpointManager.latest()`` can refuse the checkpoint and fall back to an older one.

The fields checked (format version 2; version 1 manifests come from before run ids):

- ``format``: ``"portable.checkpoint"``; ``version``: 1 or 2.
- ``run_id``: the run that wrote the checkpoint, 1 to 64 of ``[A-Za-z0-9_-]``; required in
  version 2, absent in version 1 (a legacy run).
- ``epoch``, ``step``: non-negative ints, equal to the ones in the manifest's file name.
- ``files.params`` and ``files.states``: ``{"path", "bytes", "sha256"}`` with ``path`` the
  checkpoint's own file (``<stem>.params.safetensors``), ``bytes`` an int in
  ``[0, MAX_FILE_BYTES]`` and ``sha256`` 64 lower-case hex digits.

Example:
    >>> manifest_name("ckpt", 3, 120)
    'ckpt-e0003-s00000120.json'
    >>> len(new_run_id())
    32
"""
from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from portable.errors import SerializationError
from portable.io.json_records import parse_json

CHECKPOINT_FORMAT = "portable.checkpoint"
FORMAT_VERSION = 2            # 2: manifests name their run (run_id)
LEGACY_VERSION = 1            # 1: written before run ids existed
ROLES = ("params", "states")  # the tensor files of one checkpoint
# One checkpoint file larger than this is not one portable wrote (a bound, not a budget).
MAX_FILE_BYTES = 1 << 40
# Epochs and steps stay exact in every JSON reader (IEEE doubles hold integers up to 2**53).
MAX_COUNT = 1 << 53

RUN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# <prefix>-e<epoch>-s<step>.json, and the tensor files named after the same stem
NAME = re.compile(r"^(?P<prefix>.+)-e(?P<epoch>\d+)-s(?P<step>\d+)\.json$")
_FILE = re.compile(r"^(?P<prefix>.+)-e\d+-s\d+(\.json|\.(params|states)\.safetensors)$")


def new_run_id() -> str:
    """A new run id: 32 random hex digits (uuid4), unique across machines and restarts."""
    return uuid.uuid4().hex


def check_run_id(value: Any, what: str) -> str:
    """``value`` if it is a valid run id, else a SerializationError naming ``what``."""
    if not isinstance(value, str) or not RUN_ID.match(value):
        raise SerializationError(f"{what}: run id {value!r:.80} is not 1 to 64 letters, digits, "
                                 f"'_' or '-'")
    return value


def manifest_name(prefix: str, epoch: int, step: int) -> str:
    """The file name of the manifest of the checkpoint at ``epoch`` and ``step``."""
    return f"{prefix}-e{epoch:04d}-s{step:08d}.json"


def tensor_file_name(manifest: str | Path, role: str) -> str:
    """The name of a checkpoint's ``role`` (params or states) file, from its manifest's name."""
    return f"{Path(manifest).name[:-len('.json')]}.{role}.safetensors"


def is_checkpoint_file(name: str, prefix: str) -> bool:
    """Whether ``name`` is a checkpoint file of ``prefix`` (a manifest or a tensor file): the
    only files ``CheckpointManager`` ever deletes."""
    match = _FILE.match(name)
    return bool(match) and match["prefix"] == prefix


def parse_manifest(text: str, path: str | Path) -> dict:
    """Parse and check a manifest's text (what ``path`` holds).

    Returns:
        The manifest, every field listed in the module docstring checked.

    Raises:
        SerializationError: not JSON, or JSON ``portable.io.json_records.parse_json`` refuses
            (nested too deep, a key twice), or a field missing, of the wrong type or out of
            range; names the manifest and the key.

    Example:
        >>> parse_manifest("[]", "ckpt-e0001-s00000001.json")
        Traceback (most recent call last):
        ...
        portable.errors.SerializationError: checkpoint manifest ckpt-e0001-s00000001.json: ...
    """
    # (the shared parser: deep nesting, a key given twice and lone surrogates are refused)
    manifest = parse_json(text, f"checkpoint manifest {path}")
    check_manifest(manifest, path)
    return manifest


def check_manifest(manifest: Any, path: str | Path) -> None:
    """Check an already parsed manifest (see ``parse_manifest``)."""
    where = f"checkpoint manifest {path}"
    if not isinstance(manifest, dict):
        raise SerializationError(f"{where}: not a JSON object but {_kind(manifest)}")
    if manifest.get("format") != CHECKPOINT_FORMAT:
        raise SerializationError(f"{where}: not a portable checkpoint (key 'format' is "
                                 f"{manifest.get('format')!r:.80}, not {CHECKPOINT_FORMAT!r})")
    version = manifest.get("version")
    if not _is_int(version) or version not in (LEGACY_VERSION, FORMAT_VERSION):
        raise SerializationError(f"{where}: key 'version' is {version!r:.80}; this portable "
                                 f"reads versions {LEGACY_VERSION} and {FORMAT_VERSION}")
    if version == FORMAT_VERSION:
        check_run_id(_get(manifest, "run_id", where), f"{where}: key 'run_id'")
    elif "run_id" in manifest:
        raise SerializationError(f"{where}: key 'run_id' in a version {LEGACY_VERSION} "
                                 f"manifest, which predates run ids")
    name = NAME.match(Path(path).name)
    for key in ("epoch", "step"):
        value = count(_get(manifest, key, where), f"{where}: key {key!r}")
        if name and int(name[key]) != value:
            raise SerializationError(f"{where}: key {key!r} is {value}, but the file is named "
                                     f"for {key} {int(name[key])}")
    listed = _get(manifest, "files", where)
    if not isinstance(listed, dict):
        raise SerializationError(f"{where}: key 'files' is {_kind(listed)}, not an object")
    for role in ROLES:
        _check_file_entry(_get(listed, role, f"{where}: key 'files'"), role, path)


def _check_file_entry(entry: Any, role: str, path: str | Path) -> None:
    where = f"checkpoint manifest {path}: key 'files.{role}"
    if not isinstance(entry, dict):
        raise SerializationError(f"{where}' is {_kind(entry)}, not an object")
    file_path = _get(entry, "path", where + "'")
    if not isinstance(file_path, str):
        raise SerializationError(f"{where}.path' is {_kind(file_path)}, not a file name")
    expected = tensor_file_name(path, role) if NAME.match(Path(path).name) else None
    if expected is not None and file_path != expected:
        # A checkpoint owns its files: one named elsewhere could be another checkpoint's, which
        # pruning would delete from under it.
        raise SerializationError(f"{where}.path' is {file_path!r:.80}; a checkpoint's {role} "
                                 f"file must be its own, {expected!r}, inside the manifest's "
                                 f"folder")
    size = _get(entry, "bytes", where + "'")
    if not _is_int(size) or not 0 <= size <= MAX_FILE_BYTES:
        raise SerializationError(f"{where}.bytes' is {size!r:.80}, not a size in bytes from 0 "
                                 f"to {MAX_FILE_BYTES}")
    digest = _get(entry, "sha256", where + "'")
    if not isinstance(digest, str) or not _SHA256.match(digest):
        raise SerializationError(f"{where}.sha256' is {digest!r:.80}, not 64 lower-case hex "
                                 f"digits")


def count(value: Any, what: str) -> int:
    """``value`` if it is an int in ``[0, MAX_COUNT]`` (not a bool), else a SerializationError
    naming ``what``."""
    if not _is_int(value) or not 0 <= value <= MAX_COUNT:
        raise SerializationError(f"{what} is {value!r:.80}, not a whole number from 0 to "
                                 f"{MAX_COUNT}")
    return value


def _get(mapping: dict, key: str, where: str) -> Any:
    if key not in mapping:
        raise SerializationError(f"{where}: key {key!r} is missing")
    return mapping[key]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "an integer", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
