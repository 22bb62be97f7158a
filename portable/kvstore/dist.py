"""The distributed stores' names, as data (``portable.kvstore`` adds them to its table; no MPI
at import time).

Each entry is imported on first ``create``; mpi4py is imported only then.

* ``dist_sync`` (``dist_sync_device``, ``dist_device_sync``): fused, prioritised allreduce;
* ``dist_sync_hierarchical`` (``dist_hier``): the same with a two-level reduction;
* ``dist_async`` (``dist_device_async``): parameter servers on dedicated ranks, optionally with
  allreduce groups of workers (the MXNET-MPI hybrid); ``algorithm="easgd"`` or ``"local_sgd"``
  picks Elastic SGD or model averaging on the same roles
  (:mod:`portable.kvstore.async_algorithms`).

Example:
    >>> STORES["dist_sync"]
    'portable.kvstore.dist_sync:DistSyncKVStore'
"""
from __future__ import annotations

_SYNC = "portable.kvstore.dist_sync:DistSyncKVStore"
_HIER = "portable.kvstore.hierarchical:HierarchicalKVStore"
_ASYNC = "portable.kvstore.async_algorithms:create_dist_async"

STORES = {
    "dist_sync": _SYNC, "dist_sync_device": _SYNC, "dist_device_sync": _SYNC,
    "dist_sync_hierarchical": _HIER, "dist_hier": _HIER,
    "dist_async": _ASYNC, "dist_device_async": _ASYNC,
}
