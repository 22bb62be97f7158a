"""Key-value stores that synchronise parameters (MXNet's ``mx.kv``).

``create(name)`` looks the name up in ``kvstores``, a table of name -> ``"module:Class"``
imported on first use, so a store that needs mpi4py imports it only when created. The MPI
stores come from ``dist.STORES``; another store is added with ``register(name, target)``.

Example:
    >>> import portable as pt
    >>> kv = pt.kv.create("local")
    >>> kv.rank, kv.num_workers
    (0, 1)
"""
from __future__ import annotations

import importlib
from typing import Any

from portable.errors import PortableError
from portable.kvstore.base import KVStore
from portable.kvstore.dist import STORES
from portable.kvstore.local import LocalKVStore

# store name -> "module:attribute" (imported lazily) or a KVStore subclass
kvstores: dict[str, Any] = {
    "local": LocalKVStore,
    "device": LocalKVStore,
    # MXNet 1.x spellings of the same single-process stores
    "local_update_cpu": LocalKVStore,
    "local_allreduce_cpu": LocalKVStore,
    "local_allreduce_device": LocalKVStore,
    **STORES,
}


def register(name: str, target: Any) -> None:
    """Make a store available to ``create``.

    Args:
        name: the store name (e.g. ``dist_sync``).
        target: a KVStore subclass, or ``"module:Class"`` to import on first use.
    """
    kvstores[name] = target


def create(name: "str | KVStore" = "local", **kwargs: Any) -> KVStore:
    """Create a KVStore by name (MXNet's ``mx.kv.create``).

    Args:
        name: ``local``, ``device``, or a registered distributed store; a KVStore instance is
            returned unchanged.
        **kwargs: passed to the store's constructor.

    Returns:
        The store.

    Example:
        >>> create("local").type
        'local'
    """
    if isinstance(name, KVStore):
        return name
    target = kvstores.get(name)
    if target is None:
        raise PortableError(f"unknown kvstore {name!r}; available: {', '.join(kvstores)}")
    if isinstance(target, str):
        module_name, _, attr = target.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attr)
        except ImportError as exc:
            raise PortableError(f"kvstore {name!r} cannot be loaded from {module_name}: "
                                f"{exc}") from exc
    canonical = {"local_update_cpu": "local", "local_allreduce_cpu": "local",
                 "local_allreduce_device": "device"}.get(name, name)
    return target(canonical, **kwargs)


__all__ = ["KVStore", "LocalKVStore", "create", "kvstores", "register"]
