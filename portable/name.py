"""Automatic naming of symbol nodes (MXNet 1.x ``mx.name``): ``NameManager`` numbers nodes per
hint (``fullyconnected0``, ``fullyconnected1``), ``Prefix`` also puts a prefix before every name
made while it is active, the names given by the user included (variables excepted).

Example:
    >>> import portable as mx
    >>> data = mx.sym.var("data")
    >>> with mx.name.Prefix("mynet_"):
    ...     net = mx.sym.FullyConnected(data, num_hidden=10, name="fc1")
    >>> net.list_arguments()
    ['data', 'mynet_fc1_weight', 'mynet_fc1_bias']
"""
from __future__ import annotations

import threading
from typing import Any


class NameManager:
    """Numbers automatic names per hint; ``with NameManager():`` starts fresh counters."""

    _current = threading.local()

    def __init__(self) -> None:
        self._counter: dict[str, int] = {}
        self._old_manager: NameManager | None = None

    def get(self, name: str | None, hint: str) -> str:
        """``name`` when given, else ``<hint><n>`` with ``n`` counting per hint.

        Args:
            name: the user's name, or None.
            hint: the lower-case op name used for automatic names.

        Returns:
            The node's name.
        """
        if name:
            return name
        number = self._counter.get(hint, 0)
        self._counter[hint] = number + 1
        return f"{hint}{number}"

    def __enter__(self) -> "NameManager":
        self._old_manager = current()
        NameManager._current.value = self
        return self

    def __exit__(self, *exc: Any) -> None:
        NameManager._current.value = self._old_manager


class Prefix(NameManager):
    """A NameManager that puts ``prefix`` before every name it hands out.

    Args:
        prefix: e.g. ``"mynet_"``.
    """

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self._prefix = prefix

    def get(self, name: str | None, hint: str) -> str:
        return self._prefix + super().get(name, hint)


def current() -> NameManager:
    """The name manager of this thread (a process-wide default outside any ``with``)."""
    manager = getattr(NameManager._current, "value", None)
    if manager is None:
        manager = NameManager._current.value = _DEFAULT
    return manager


_DEFAULT = NameManager()

__all__ = ["NameManager", "Prefix", "current"]
