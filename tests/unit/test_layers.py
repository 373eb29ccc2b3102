"""The import graph of the installed package: no cycle, and q-view's layers
import only downwards (docs/architecture.md, "Layers").

Every import counts: at the top of a module, inside a function, and under
``TYPE_CHECKING``. A cycle kept apart by a local import is still a cycle
for whoever reads or changes the code.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

PACKAGES = ("qtools.common", "qtools.qformat", "qtools.daemon", "qtools.viewer")
# q-view's layers, lowest first: a module may import its own layer and those below
VIEWER_LAYERS = ("model", "inputs", "naming", "profile", "render", "commands")


def _root(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, package
    return Path(next(iter(spec.submodule_search_locations)))


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        root = _root(package)
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                out.add(sub if sub in known else module)
    return {m for m in out if m in known and m != name}


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def viewer_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["qtools", "viewer"] or len(parts) < 3:
        return None
    return VIEWER_LAYERS.index(parts[2]) if parts[2] in VIEWER_LAYERS else -1


def test_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_closes_a_cycle():
    graph = import_graph()
    assert len(graph) > 150  # the whole package was read
    assert cycles(graph) == []


def test_every_viewer_module_is_in_a_layer():
    outside = [m for m in import_graph() if viewer_layer(m) == -1]
    assert outside == []


@pytest.mark.parametrize("package, above", [
    ("qtools.common", ("qtools.qformat", "qtools.daemon", "qtools.viewer")),
    ("qtools.qformat", ("qtools.daemon", "qtools.viewer"))])
def test_the_shared_packages_import_neither_side(package, above):
    """common (what both commands share that is no file format) is below
    qformat, and qformat below the daemon and the viewer."""
    graph = import_graph()
    upward = {m: sorted(d for d in deps if d.startswith(above))
              for m, deps in graph.items() if m.startswith(package)}
    assert {m: d for m, d in upward.items() if d} == {}


def test_the_daemon_and_the_viewer_share_only_the_file_format():
    graph = import_graph()
    crossing = [(m, d) for m, deps in graph.items() for d in deps
                if (m.startswith("qtools.daemon") and d.startswith("qtools.viewer"))
                or (m.startswith("qtools.viewer") and d.startswith("qtools.daemon"))]
    assert crossing == []


def test_viewer_layers_import_only_downwards():
    graph = import_graph()
    upward = [(m, d) for m, deps in graph.items() for d in deps
              if (lm := viewer_layer(m)) is not None and (ld := viewer_layer(d)) is not None
              and ld > lm]
    assert upward == []
