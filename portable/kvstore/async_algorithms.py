"""``create("dist_async", algorithm=...)``: the algorithms that run on ``dist_async``'s roles
(parameter-server ranks and allreduce groups of workers), as data.

* ``sgd`` (default): the servers apply the optimizer to pushed gradients
  (:mod:`portable.kvstore.dist_async`);
* ``easgd``: groups train replicas, the servers hold EASGD's centre variable
  (:mod:`portable.kvstore.easgd`; ``alpha``, ``tau``, ``sync``);
* ``local_sgd``: replicas averaged over every worker every ``tau`` steps
  (:mod:`portable.kvstore.local_sgd`).

Each is imported on first use (mpi4py only then). Settings that the chosen algorithm does not
take are refused by name, never silently ignored.

Example:
    >>> sorted(ALGORITHMS)
    ['easgd', 'local_sgd', 'sgd']
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any

from portable.errors import PortableError

ALGORITHMS = {
    "sgd": "portable.kvstore.dist_async:DistAsyncKVStore",
    "easgd": "portable.kvstore.easgd:ElasticKVStore",
    "local_sgd": "portable.kvstore.local_sgd:LocalSGDKVStore",
}


def algorithm_class(algorithm: str) -> type:
    """The store class of ``algorithm`` (imported now)."""
    target = ALGORITHMS.get(algorithm)
    if target is None:
        raise PortableError(f"kvstore dist_async: unknown algorithm {algorithm!r}; available: "
                            f"{', '.join(ALGORITHMS)}")
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def create_dist_async(name: str = "dist_async", algorithm: str = "sgd", **kwargs: Any) -> Any:
    """The ``dist_async`` store running ``algorithm`` (what ``kv.create`` calls).

    Args:
        name: the store type (``dist_async`` or ``dist_device_async``).
        algorithm: ``sgd``, ``easgd`` or ``local_sgd``.
        **kwargs: the algorithm's settings (``group_size``, ``alpha``, ``tau``, ``sync`` ...).

    Returns:
        The store.
    """
    cls = algorithm_class(algorithm)
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "name"}
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        takers = sorted(a for a in ALGORITHMS if a != algorithm and set(unknown) <= set(
            inspect.signature(algorithm_class(a).__init__).parameters))
        hint = f"; algorithm {' or '.join(map(repr, takers))} takes them" if takers else ""
        raise PortableError(f"kvstore {name} (algorithm {algorithm!r}) takes no "
                            f"{', '.join(unknown)} (it takes {', '.join(sorted(accepted))})"
                            f"{hint}")
    return cls(name, **kwargs)
