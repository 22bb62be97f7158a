"""A group of keys reduced as one request: where its data are, as one flat array.

``allreduce_group`` of a group the store was told of in advance (``gluon.Trainer`` declares
its bucket-sized runs of gradients, one ``pushpull`` call each, when it sets up the store,
right after the keys, on every rank alike) becomes a single request of a key of its own,
registered with the keys, so that every rank numbers it alike and a rank that runs out of
data early (``join``) knows it too. The queue then
negotiates, plans and completes one slot per group instead of one per tensor: a ResNet-50 step
costs 40-odd requests instead of 161, and on a rank oversubscribed by its neighbours that
bookkeeping is CPU every other rank waits for.

The group's data travel as one flat array: a view over the arrays when they lie back to back,
in order, in one buffer (the Trainer lays gradients out so), found once per set of arrays and
then reused; otherwise a packed copy, unpacked into the arrays once the sum is in.

Example:
    >>> import numpy as np
    >>> f32 = np.dtype("float32")
    >>> gather = Gather(("a", "b"), [KeyEntry("a", (2,), 2, f32), KeyEntry("b", (1,), 1, f32)])
    >>> buffer = np.arange(3, dtype=f32)
    >>> flat, span, unpack = gather.flat([buffer[:2], buffer[2:]])
    >>> flat.base is not None and unpack is None    # a view: nothing to copy back
    True
    >>> flat, span, unpack = gather.flat([np.zeros(2, f32), np.ones(1, f32)])
    >>> flat.tolist(), unpack is not None           # separate arrays: packed
    ([0.0, 0.0, 1.0], True)
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from portable.errors import PortableError
from portable.kvstore.requests import Span, joined_view, span_of
from portable.kvstore.slots import KeyEntry

# Sets of arrays whose layout was looked up, per group. The arrays themselves are kept, so
# that an id in a cached key cannot be reused by another array while the entry lives.
_MAX_LAYOUTS = 8


class Gather:
    """One group's keys, and how to read its arrays as one flat array.

    Args:
        keys: the group's keys, in push order.
        entries: their registered entries (shape and dtype every push is checked against).
    """

    def __init__(self, keys: tuple, entries: list[KeyEntry]) -> None:
        self.keys = keys
        self.entries = entries
        self.dtype = entries[0].dtype
        self.numel = sum(entry.numel for entry in entries)
        # how its request is named in status reports and timeouts (every rank names it alike)
        self.label = (f"{keys[0]!r}" if len(keys) == 1 else f"{keys[0]!r}..{keys[-1]!r}"
                      ) + f" (a declared group of {len(keys)})"
        self._layouts: dict[tuple[int, ...], tuple[tuple, np.ndarray, Span]] = {}
        self._checked: tuple[list, list] = ([], [])  # the arrays last checked, their data
        self.slot: Any = None      # the group's slot (set by the queue that declared it)
        self.op_label = ""         # its engine op name

    def same_arrays(self, arrays: list) -> bool:
        """``arrays`` are the ones last checked, each still on the same data (so with the
        shape, dtype and memory that passed :meth:`check` and :func:`group_of`)."""
        checked, datas = self._checked
        return len(checked) == len(arrays) and all(
            a is b and a._data is data for a, b, data in zip(arrays, checked, datas))

    def remember(self, arrays: list) -> None:
        """Keep ``arrays`` as checked (strong references: an id is never reused meanwhile)."""
        self._checked = (list(arrays), [array._data for array in arrays])

    def check(self, arrays: list, store: str) -> None:
        """Every array has its key's registered shape and dtype."""
        for entry, array in zip(self.entries, arrays):
            data = array._data
            if data.shape != entry.shape or data.dtype != entry.dtype:
                raise PortableError(f"kvstore {store}: key {entry.key!r} was initialised as "
                                    f"{entry.dtype}{list(entry.shape)}, got "
                                    f"{array.dtype}{list(array.shape)}")

    def flat(self, hosts: list[np.ndarray]
             ) -> tuple[np.ndarray, Span | None, Callable[[], None] | None]:
        """The group's data as one flat array, where it lies, and what copies the reduced
        sum back into ``hosts`` (None: the flat array is a view of them).

        Args:
            hosts: the arrays' NumPy data, in key order.
        """
        ids = tuple(map(id, hosts))
        layout = self._layouts.get(ids)
        if layout is not None:
            return layout[1], layout[2], None
        view = self._view(hosts)
        if view is not None:
            if len(self._layouts) >= _MAX_LAYOUTS:
                self._layouts.clear()
            self._layouts[ids] = (tuple(hosts), *view)
            return view[0], view[1], None
        packed = np.empty(self.numel, self.dtype)
        at = 0
        for host in hosts:
            packed[at:at + host.size] = host.reshape(-1)
            at += host.size

        def unpack() -> None:
            offset = 0
            for host in hosts:
                host[...] = packed[offset:offset + host.size].reshape(host.shape)
                offset += host.size

        return packed, span_of(packed), unpack

    def _view(self, hosts: list[np.ndarray]) -> tuple[np.ndarray, Span] | None:
        """A view over ``hosts`` when they lie back to back, in order, in one buffer."""
        if not all(host.flags.c_contiguous for host in hosts):
            return None
        spans = [span_of(host.reshape(-1)) for host in hosts]
        first = spans[0]
        if first is None or any(
                span is None or span.root is not first.root or span.start != before.stop
                for before, span in zip(spans, spans[1:])):
            return None
        whole = joined_view(hosts[0].reshape(-1), first, self.numel)
        return whole, Span(first.root, first.start, spans[-1].stop)


def group_of(pairs: list[tuple[Any, Any]]) -> tuple | None:
    """The group key of a ``pushpull`` call's (key, array) pairs, or None when they cannot
    travel as one request (no key, a key twice, device arrays, or mixed dtypes). The queue
    uses it only for groups declared in advance.

    Example:
        >>> group_of([]) is None
        True
    """
    if not pairs:
        return None
    keys = tuple(key for key, _ in pairs)
    if len(set(keys)) != len(keys):
        return None
    datas = [array._data for _, array in pairs]
    if not all(type(data) is np.ndarray for data in datas):
        return None
    if len({data.dtype for data in datas}) != 1:
        return None
    return ("group",) + keys  # (a tuple: never a user's key, which is an int or a str)
