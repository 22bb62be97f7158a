"""Persistence helpers shared by every saver: atomic writes, JSON encoding of tensors."""

# MXNet's ``mx.io`` data iterators live with the other data code (portable.data.iterators);
# ``portable.io`` is also the name MXNet scripts reach them by, so it hands them out on use.
_ITERATOR_NAMES = ("DataIter", "NDArrayIter", "MNISTIter", "CSVIter", "DataBatch", "DataDesc",
                   "ResizeIter", "PrefetchingIter")


def __getattr__(name: str):
    if name in _ITERATOR_NAMES:
        import importlib

        return getattr(importlib.import_module("portable.data.iterators"), name)
    raise AttributeError(f"module 'portable.io' has no attribute {name!r}")
