"""Model exporters by format name, registered by the edges that implement them.

The core never imports an exporter: ``Block.export_onnx`` asks this registry for ``"onnx"``.
An exporter registers itself when its module is imported (``register_exporter``), and is
found without being imported first through the ``portable.exporters`` entry-point group that
the package declares in ``pyproject.toml``. An exporter that cannot be loaded (its optional
dependency is missing) is a ``MissingDependencyError`` naming the extra to install.

Example:
    >>> export = get_exporter("onnx")                                 # doctest: +SKIP
    >>> export(graph, params, "model.onnx", None, dynamic_batch=True)  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Any, Callable

from portable.errors import MissingDependencyError

ENTRY_POINT_GROUP = "portable.exporters"
# The pip extra that brings each known format's exporter and its dependencies.
EXTRAS = {"onnx": "onnx"}

exporters: dict[str, Callable[..., Any]] = {}


def register_exporter(fmt: str, export: Callable[..., Any]) -> None:
    """Make ``export`` the exporter of ``fmt`` (called by the exporter's own module)."""
    exporters[fmt] = export


def get_exporter(fmt: str) -> Callable[..., Any]:
    """The exporter of ``fmt``: registered, or loaded from its entry point.

    Raises:
        MissingDependencyError: no exporter of ``fmt`` is installed, or it cannot be loaded.
    """
    if fmt in exporters:
        return exporters[fmt]
    from importlib import metadata  # only on a first export: it scans the installed packages

    extra = EXTRAS.get(fmt, fmt)
    found = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == fmt]
    if not found:
        raise MissingDependencyError(
            f"no {fmt} exporter is installed (entry point group {ENTRY_POINT_GROUP!r}); "
            f"install it with pip install 'portable[{extra}]'")
    try:
        export = found[0].load()
    except ImportError as exc:
        raise MissingDependencyError(
            f"the {fmt} exporter ({found[0].value}) cannot be loaded: {exc}; "
            f"install its dependencies with pip install 'portable[{extra}]'") from exc
    register_exporter(fmt, export)
    return export
