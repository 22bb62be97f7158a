"""Training checkpoints: tensors in safetensors, metadata in JSON, written atomically, verified
on load.

Each checkpoint (``CheckpointManager``) is a parameters file, an optimizer-states file and a
JSON manifest (architecture, epoch, step, RNG and data-order state, metrics, and the size and
SHA-256 of both tensor files). The tensor files are ``portable.io.tensors``' verified tensor
files; files are written with ``portable.io.atomic`` (temporary file, fsync, rename) and the
manifest last, so a process killed at any moment leaves every earlier checkpoint complete; a
checkpoint whose manifest is missing, unreadable or disagrees with its files is refused and the
previous one is used.

Example:
    >>> import tempfile
    >>> from portable.io.tensors import tensors_to_bytes
    >>> mgr = CheckpointManager(tempfile.mkdtemp())
    >>> _ = mgr.save({"w": np.ones(3, np.float32)}, tensors_to_bytes({}), {"epoch": 1, "step": 9})
    >>> mgr.latest().params["w"].tolist()
    [1.0, 1.0, 1.0]
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from portable.errors import SerializationError
from portable.io import files
from portable.io.atomic import atomic_write_bytes, atomic_write_text, remove_stale_temporaries
from portable.io.tensors import save_tensors, tensors_from_bytes

log = logging.getLogger("portable.checkpoint")

CHECKPOINT_FORMAT = "portable.checkpoint"
FORMAT_VERSION = 1


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# -- training checkpoints ----------------------------------------------------------------------


@dataclass
class Checkpoint:
    """One loaded, verified checkpoint."""

    manifest: dict
    params: dict[str, np.ndarray]
    states: bytes  # the optimizer-states tensor file, as Trainer.load_states reads it
    path: Path     # the manifest
    refused: list[str] = field(default_factory=list)  # newer checkpoints that failed to load

    @property
    def epoch(self) -> int:
        return int(self.manifest["epoch"])

    @property
    def step(self) -> int:
        return int(self.manifest["step"])


_NAME = re.compile(r"^(?P<prefix>.+)-e(?P<epoch>\d+)-s(?P<step>\d+)\.json$")


class CheckpointManager:
    """Writes, lists, prunes and loads the checkpoints of one run in ``directory``.

    Args:
        directory: where checkpoints live (created on first save).
        prefix: file-name prefix.
        keep: how many newest checkpoints to keep (older ones are deleted after a save).

    Example:
        >>> import tempfile
        >>> from portable.io.tensors import tensors_to_bytes
        >>> mgr = CheckpointManager(tempfile.mkdtemp())
        >>> states = tensors_to_bytes({}, {})  # what Trainer.get_states() returns
        >>> _ = mgr.save({"w": np.zeros(2, np.float32)}, states, {"epoch": 1, "step": 10})
        >>> mgr.latest().epoch
        1
    """

    def __init__(self, directory: str | os.PathLike, prefix: str = "ckpt", keep: int = 3) -> None:
        if keep < 1:
            raise SerializationError(f"CheckpointManager keep must be >= 1, got {keep}")
        self.directory = Path(directory)
        self.prefix = prefix
        self.keep = keep
        remove_stale_temporaries(self.directory)  # left by a run killed while it saved

    def _stem(self, epoch: int, step: int) -> str:
        return f"{self.prefix}-e{epoch:04d}-s{step:08d}"

    def save(self, params: dict[str, np.ndarray], states: bytes, manifest: dict) -> Path:
        """Write one checkpoint (tensor files first, manifest last) and prune old ones.

        Args:
            params: parameter name -> array.
            states: the optimizer-states file content (``Trainer.states_bytes()``).
            manifest: JSON data; must hold ``epoch`` and ``step``.

        Returns:
            The manifest path.
        """
        epoch, step = int(manifest["epoch"]), int(manifest["step"])
        stem = self._stem(epoch, step)
        files = {}
        for role in ("params", "states"):
            name = f"{stem}.{role}.safetensors"
            path = self.directory / name
            if role == "params":
                save_tensors(path, params, {"role": "params"})
            else:
                atomic_write_bytes(path, states)
            files[role] = {"path": name, "bytes": path.stat().st_size,
                           "sha256": _file_sha256(path)}
        full = {"format": CHECKPOINT_FORMAT, "version": FORMAT_VERSION, **manifest,
                "files": files}
        path = self.directory / f"{stem}.json"
        atomic_write_text(path, json.dumps(full, indent=1, sort_keys=True))
        self.prune()
        return path

    def manifests(self) -> list[Path]:
        """Manifest paths, oldest first (by epoch, then step)."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = _NAME.match(path.name)
            if match and match.group("prefix") == self.prefix:
                found.append((int(match.group("epoch")), int(match.group("step")), path))
        return [p for _, _, p in sorted(found)]

    def prune(self) -> None:
        """Delete all but the ``keep`` newest checkpoints (manifest first, then its files)."""
        for manifest in self.manifests()[:-self.keep]:
            stem = manifest.name[:-len(".json")]
            manifest.unlink(missing_ok=True)
            for role in ("params", "states"):
                (self.directory / f"{stem}.{role}.safetensors").unlink(missing_ok=True)

    def load(self, manifest_path: str | os.PathLike) -> Checkpoint:
        """Load one checkpoint, verifying the manifest, both files' sizes and digests.

        Raises:
            SerializationError: naming the file at fault.
        """
        path = Path(manifest_path)
        text = files.read_text(path, "checkpoint manifest")
        try:
            manifest = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise SerializationError(f"checkpoint manifest {path}: unreadable ({exc})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != CHECKPOINT_FORMAT:
            raise SerializationError(f"checkpoint manifest {path}: not a portable checkpoint")
        blobs = {}
        for role in ("params", "states"):
            entry = manifest.get("files", {}).get(role)
            if not entry:
                raise SerializationError(f"checkpoint manifest {path}: no {role} file listed")
            file = files.resolve_inside(path.parent, entry["path"],
                                        f"checkpoint manifest {path}: {role} file")
            data = files.read_bytes(file, "checkpoint file", limit=entry["bytes"])
            if len(data) != entry["bytes"]:
                raise SerializationError(f"checkpoint file {file}: truncated: {len(data)} bytes,"
                                         f" the manifest says {entry['bytes']}")
            if hashlib.sha256(data).hexdigest() != entry["sha256"]:
                raise SerializationError(f"checkpoint file {file}: corrupted: its SHA-256 does "
                                         f"not match the manifest")
            blobs[role] = (file, data)
        params, _ = tensors_from_bytes(blobs["params"][1], str(blobs["params"][0]))
        tensors_from_bytes(blobs["states"][1], str(blobs["states"][0]))  # verify now
        return Checkpoint(manifest, params, blobs["states"][1], path)

    def latest(self) -> Checkpoint | None:
        """The newest checkpoint that loads; newer broken ones are logged and skipped.

        Returns:
            The checkpoint (``refused`` lists the errors of skipped newer ones), or None when
            the directory holds no checkpoint at all.

        Raises:
            SerializationError: when checkpoints exist but none of them loads.
        """
        refused = []
        for manifest in reversed(self.manifests()):
            try:
                checkpoint = self.load(manifest)
            except SerializationError as exc:
                log.warning("refusing checkpoint: %s", exc)
                refused.append(str(exc))
                continue
            checkpoint.refused = refused
            return checkpoint
        if refused:
            raise SerializationError(f"no usable checkpoint in {self.directory}: "
                                     + "; ".join(refused))
        return None
