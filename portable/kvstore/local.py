"""The single-process stores: ``local`` aggregates on the CPU, ``device`` on the device of the
first value (MXNet's ``local`` and ``device`` KVStores).

Example:
    >>> import portable as pt
    >>> kv = pt.kv.create("device")
    >>> kv.type
    'device'
"""
from __future__ import annotations

from typing import Any

from portable.device import Device, cpu
from portable.kvstore.base import KVStore


class LocalKVStore(KVStore):
    """Aggregates the values pushed from several devices of one process.

    Args:
        name: ``local`` (sums and stores on the CPU) or ``device`` (on the values' device).
    """

    def __init__(self, name: str = "local") -> None:
        super().__init__(name)

    def _store_device(self, value: Any) -> Device:
        return value.device if self.type == "device" else cpu()
