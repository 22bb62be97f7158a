"""The layering of DESIGN.md section 2, read from the code's own imports (module level and
inside functions; not those under ``if TYPE_CHECKING:``): the core never imports the edges
(``exporters``, ``backends``; only ``portable/cli`` may), the IR is the bottom of the core, a
backend never imports another backend (the shared kernels of ``backends/xp`` excepted), and no
files import each other in a circle.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("portable", "backends", "exporters")
EDGES = ("backends", "exporters")

def _module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the three packages."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def _imported_modules(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that ``path`` imports anywhere in it at run time (``from a.b import
    c`` counts as ``a.b.c`` when that is a module, else as ``a.b``)."""
    targets: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules
                     else node.module for alias in node.names]
        else:
            continue
        targets.update(name for name in names if name in modules)
    return targets


@functools.lru_cache(maxsize=1)  # every test reads the same tree: parse it once
def _import_graph() -> dict[str, set[str]]:
    """File -> the files it imports (paths relative to the repository root)."""
    modules = _module_files()
    rel = {name: path.relative_to(ROOT).as_posix() for name, path in modules.items()}
    return {rel[name]: {rel[target] for target in _imported_modules(path, modules)} - {rel[name]}
            for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one file (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_core_never_imports_the_edges():
    graph = _import_graph()
    offending = sorted(f"{source} imports {target}" for source, targets in graph.items()
                       if source.startswith("portable/") and not source.startswith("portable/cli/")
                       for target in targets if target.startswith(tuple(f"{e}/" for e in EDGES)))
    assert not offending, "the core names an edge:\n" + "\n".join(offending)


def test_the_ir_is_the_bottom_of_the_core():
    """The IR is what every pass, front end and backend speaks: it needs only itself and the
    exception classes, never type inference (passes) or the op table."""
    allowed = ("portable/ir/", "portable/errors.py")
    offending = sorted(f"{source} imports {target}" for source, targets in _import_graph().items()
                       if source.startswith("portable/ir/")
                       for target in targets if not target.startswith(allowed))
    assert not offending, "the IR reaches up:\n" + "\n".join(offending)


SHARED_KERNELS = "xp"  # backends/xp: kernels over ctx.xp that backends register from


def test_backends_never_import_each_other():
    """A backend may import the shared kernels of ``backends/xp`` (not a backend: no device),
    which import no backend."""
    def backend(path: str) -> str | None:
        parts = path.split("/")
        return parts[1] if parts[0] == "backends" and len(parts) > 2 else None

    graph = _import_graph()
    offending = sorted(f"{source} imports {target}" for source, targets in graph.items()
                       for target in targets
                       if backend(source) and backend(target) and backend(source) != backend(target)
                       and backend(target) != SHARED_KERNELS)
    assert not offending, "a backend imports another:\n" + "\n".join(offending)


def test_no_import_circles():
    found = _circles(_import_graph())
    assert not found, "files that import each other in a circle (break it; DESIGN.md 2):\n" + \
        "\n".join(" <-> ".join(sorted(c)) for c in found)


def test_imports_under_type_checking_are_not_run(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n"
                      "else:\n    import b\ndef f():\n    from c import d\n")
    modules = {name: tmp_path for name in ("a", "b", "c", "c.d")}
    assert _imported_modules(source, modules) == {"b", "c.d"}


def test_the_circle_finder_finds_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert _circles(graph) == [frozenset("abc")]
