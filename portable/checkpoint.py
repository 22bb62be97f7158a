"""Training checkpoints: tensors in safetensors, metadata in JSON, written atomically, verified
on load, and owned by one run.

Each checkpoint (``CheckpointManager``) is a parameters file, an optimizer-states file and a
JSON manifest (run id, architecture, epoch, step, RNG and data-order state, metrics, and the
size and SHA-256 of both tensor files). The tensor files are ``portable.io.tensors``' verified
tensor files; files are written with ``portable.io.atomic`` (temporary file, fsync, rename) and
the manifest last, so a process killed at any moment leaves every earlier checkpoint complete;
a checkpoint whose manifest is missing, unreadable, malformed (``portable.checkpoint_manifest``
checks every field) or disagrees with its files is refused and the previous one is used.

**Runs own their folders.** Every run has a run id, written into each of its manifests. A new
run (``start``) refuses a folder that holds checkpoints, naming the run they belong to, unless
told to start afresh (``fresh=True``: the old checkpoint files, and only files named like
checkpoints, are removed first). A resumed run (``resume``) keeps the run id of the checkpoint
it continues, and loads only that run's checkpoints: the run is the one named by the newest
manifest that passes its checks, and a damaged checkpoint of it falls back to an older one of
the same run, never to another run's. Checkpoints written before run ids existed (manifest
version 1, no ``run_id``) form one legacy run: they resume as before, the continued run gets a
new run id, and they count as its own (it may fall back to them, and prunes them).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from portable.checkpoint_manifest import (CHECKPOINT_FORMAT, FORMAT_VERSION, NAME, ROLES,
                                          check_run_id, count, is_checkpoint_file,
                                          manifest_name, new_run_id, parse_manifest,
                                          tensor_file_name)
from portable.errors import SerializationError
from portable.io import files
from portable.io.atomic import atomic_write_bytes, atomic_write_text, remove_stale_temporaries
from portable.io.tensors import save_tensors, tensors_from_bytes

log = logging.getLogger("portable.checkpoint")

__all__ = ["CHECKPOINT_FORMAT", "FORMAT_VERSION", "Checkpoint", "CheckpointManager"]


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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
        return self._count("epoch")

    @property
    def step(self) -> int:
        return self._count("step")

    @property
    def run_id(self) -> str | None:
        """The run that wrote this checkpoint; None for one written before run ids."""
        value = self.manifest.get("run_id") if isinstance(self.manifest, dict) else None
        return None if value is None else check_run_id(value, f"checkpoint manifest "
                                                              f"{self.path}: key 'run_id'")

    def _count(self, key: str) -> int:
        where = f"checkpoint manifest {self.path}: key {key!r}"
        if not isinstance(self.manifest, dict) or key not in self.manifest:
            raise SerializationError(f"{where} is missing")
        return count(self.manifest[key], where)


# What a checkpoint's run is when it cannot be told: the manifest fails its checks.
_UNKNOWN = object()


class CheckpointManager:
    """Writes, lists, prunes and loads the checkpoints of one run in ``directory``.

    Args:
        directory: where checkpoints live (created on first save).
        prefix: file-name prefix.
        keep: how many newest checkpoints of the run to keep (older ones are deleted after a
            save).
        run_id: the run whose checkpoints this manager writes; None until ``start`` or
            ``resume`` settles it (a first ``save`` calls ``start()``).

    Example:
        >>> import tempfile
        >>> from portable.io.tensors import tensors_to_bytes
        >>> mgr = CheckpointManager(tempfile.mkdtemp())
        >>> mgr.start()                       # a new run: refuses a folder holding checkpoints
        []
        >>> states = tensors_to_bytes({}, {})  # what Trainer.get_states() returns
        >>> _ = mgr.save({"w": np.zeros(2, np.float32)}, states, {"epoch": 1, "step": 10})
        >>> mgr.latest().epoch
        1
    """

    def __init__(self, directory: str | os.PathLike, prefix: str = "ckpt", keep: int = 3,
                 run_id: str | None = None) -> None:
        if keep < 1:
            raise SerializationError(f"CheckpointManager keep must be >= 1, got {keep}")
        self.directory = Path(directory)
        self.prefix = prefix
        self.keep = keep
        self.run_id = None if run_id is None else check_run_id(run_id, "CheckpointManager")
        remove_stale_temporaries(self.directory)  # left by a run killed while it saved

    # -- whose folder ------------------------------------------------------------------------
    def start(self, fresh: bool = False) -> list[Path]:
        """Claim the folder for a new run (its run id: the one given, else a new one).

        Args:
            fresh: remove the checkpoints of another run found in the folder (only files
                named like checkpoints of this prefix) instead of refusing to start.

        Returns:
            The files removed.

        Raises:
            SerializationError: the folder holds checkpoints of another run and ``fresh`` is
                False (names the folder, the run and what to do).
        """
        self.run_id = self.run_id or new_run_id()
        others = {self._run_of(path) for path in self.manifests()} - {self.run_id}
        removed: list[Path] = []
        if others and not fresh:
            raise SerializationError(
                f"checkpoint folder {self.directory} holds the checkpoints of another run "
                f"({', '.join(sorted(map(_describe_run, others)))}); pass --resume (fit: "
                f"resume=True) to continue it, --fresh (fit: fresh=True) to delete them and "
                f"start afresh, or write this run to another --out folder")
        if fresh and self.directory.is_dir():
            for entry in sorted(self.directory.iterdir()):
                if is_checkpoint_file(entry.name, self.prefix) and not entry.is_dir():
                    entry.unlink(missing_ok=True)
                    removed.append(entry)
            if removed:
                log.info("removed %d checkpoint files of %s from %s", len(removed),
                         ", ".join(sorted(map(_describe_run, others))) or "no run",
                         self.directory)
        return removed

    def resume(self, check: Callable[[Checkpoint], None] | None = None) -> Checkpoint | None:
        """The checkpoint to continue from (``latest``), whose run this manager then continues
        under the same run id; with no checkpoint at all, a new run is started.

        Args:
            check: see ``latest``.
        """
        checkpoint = self.latest(check)
        if checkpoint is None:
            self.start()
            return None
        self.run_id = checkpoint.run_id or new_run_id()
        return checkpoint

    def _run_of(self, manifest: Path) -> Any:
        """The run id a manifest names (None: a legacy checkpoint; ``_UNKNOWN``: the manifest
        fails its checks)."""
        try:
            parsed = parse_manifest(files.read_text(manifest, "checkpoint manifest"), manifest)
        except SerializationError:
            return _UNKNOWN
        return parsed.get("run_id")

    def _mine(self, run: Any) -> bool:
        # Legacy checkpoints in a folder can only be ones this run continued: a new run
        # refuses a folder that holds any (see ``start``).
        return run == self.run_id or run is None

    # -- writing -----------------------------------------------------------------------------
    def save(self, params: dict[str, np.ndarray], states: bytes, manifest: dict) -> Path:
        """Write one checkpoint (tensor files first, manifest last) and prune old ones.

        Args:
            params: parameter name -> array.
            states: the optimizer-states file content (``Trainer.get_states()``).
            manifest: JSON data; must hold ``epoch`` and ``step`` (non-negative ints).

        Returns:
            The manifest path.

        Raises:
            SerializationError: a first save into a folder holding another run's checkpoints
                (see ``start``).
        """
        if self.run_id is None:
            self.start()
        epoch = count(manifest.get("epoch"), "checkpoint to save: key 'epoch'")
        step = count(manifest.get("step"), "checkpoint to save: key 'step'")
        path = self.directory / manifest_name(self.prefix, epoch, step)
        listed = {}
        for role in ROLES:
            name = tensor_file_name(path, role)
            target = self.directory / name
            if role == "params":
                save_tensors(target, params, {"role": "params"})
            else:
                atomic_write_bytes(target, states)
            listed[role] = {"path": name, "bytes": target.stat().st_size,
                            "sha256": _file_sha256(target)}
        full = {**manifest, "format": CHECKPOINT_FORMAT, "version": FORMAT_VERSION,
                "run_id": self.run_id, "files": listed}
        atomic_write_text(path, json.dumps(full, indent=1, sort_keys=True))
        self.prune()
        return path

    def manifests(self) -> list[Path]:
        """Manifest paths, oldest first (by epoch, then step)."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = NAME.match(path.name)
            if match and match.group("prefix") == self.prefix:
                found.append((int(match.group("epoch")), int(match.group("step")), path))
        return [p for _, _, p in sorted(found)]

    def prune(self) -> None:
        """Delete all but the ``keep`` newest checkpoints of this run (manifest first, then its
        files). Checkpoints whose manifest fails its checks go too; those of another run stay
        (``start`` decides about them, never a prune)."""
        candidates = [p for p in self.manifests()
                      if (run := self._run_of(p)) is _UNKNOWN or self._mine(run)]
        for manifest in candidates[:-self.keep]:
            manifest.unlink(missing_ok=True)
            for role in ROLES:
                (self.directory / tensor_file_name(manifest, role)).unlink(missing_ok=True)

    # -- reading -----------------------------------------------------------------------------
    def load(self, manifest_path: str | os.PathLike) -> Checkpoint:
        """Load one checkpoint, verifying the manifest, both files' sizes and digests.

        Raises:
            SerializationError: naming the file (and the manifest key) at fault.
        """
        path = Path(manifest_path)
        manifest = parse_manifest(files.read_text(path, "checkpoint manifest"), path)
        blobs = {}
        for role in ROLES:
            entry = manifest["files"][role]
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

    def latest(self, check: Callable[[Checkpoint], None] | None = None) -> Checkpoint | None:
        """The newest checkpoint that loads, of one run; newer broken ones are logged and
        skipped, whatever the damage.

        The run is this manager's when it has one, else the one named by the newest manifest
        that passes its checks (legacy checkpoints, without a run id, go with any run).
        Checkpoints of other runs are passed over and never loaded.

        Args:
            check: called with each loaded checkpoint; a SerializationError it raises (the
                caller's own checks: optimizer states that fit the model, training state)
                refuses that checkpoint like any other damage.

        Returns:
            The checkpoint (``refused`` lists the errors of skipped newer ones), or None when
            the directory holds no checkpoint at all.

        Raises:
            SerializationError: when checkpoints exist but none of the run's loads.
        """
        run, refused, others = self.run_id, [], set()
        for manifest in reversed(self.manifests()):
            owner = self._run_of(manifest)
            if run is None and isinstance(owner, str):
                run = owner  # the newest readable manifest with a run id decides
            if owner is not _UNKNOWN and owner is not None and owner != run:
                others.add(owner)
                log.info("passing over %s: it belongs to run %s, not %s", manifest, owner, run)
                continue
            try:
                checkpoint = self.load(manifest)
                if check is not None:
                    check(checkpoint)
            except SerializationError as exc:
                log.warning("refusing checkpoint: %s", exc)
                refused.append(str(exc))
                continue
            checkpoint.refused = refused
            return checkpoint
        if refused or others:
            tail = (f" (checkpoints of {len(others)} other run(s) were passed over: "
                    f"{', '.join(sorted(others))})" if others else "")
            raise SerializationError(f"no usable checkpoint of run {run or 'unknown'} in "
                                     f"{self.directory}: " + "; ".join(refused) + tail)
        return None


def _describe_run(run: Any) -> str:
    if run is _UNKNOWN:
        return "a run whose manifest is unreadable"
    return "a run from before run ids" if run is None else f"run {run}"
