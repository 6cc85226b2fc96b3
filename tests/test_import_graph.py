"""No import cycle in specguard/, between files or between folders (issue 27).

The graph is read with the standard library's `ast`, so it needs nothing installed and sees every import, the
ones inside functions included (a deferred import is still a dependency). Imports under `if TYPE_CHECKING:` are
left out: they never run, so they order nothing and can loop nothing; they only name types for the checker.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "specguard"
Graph = dict[str, set[str]]


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its __init__.py)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking_only(node):
            yield from (n for child in node.orelse for n in _imports_in(child))
            continue
        yield from _imports_in(node)


def _imports_in(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def _target(name: str, known: dict[str, Path]) -> str | None:
    """The package's own module an imported name lives in (`a.b.c` -> `a.b` when c is a name in a.b)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def file_graph(known: dict[str, Path]) -> Graph:
    """Module -> the package's modules it imports."""
    graph: Graph = {name: set() for name in known}
    root = next(iter(known)).split(".")[0]
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*kept, base] if base else kept)
                wanted = [f"{base}.{alias.name}" for alias in node.names]
            for imported in wanted:
                if imported.split(".")[0] == root and (target := _target(imported, known)) not in (None, name):
                    graph[name].add(target)
    return graph


def folder_of(name: str, known: dict[str, Path]) -> str:
    """A module's folder: its package (a top-level module of specguard/ is its own node)."""
    if known[name].name == "__init__.py" or name.count(".") < 2:
        return name
    return name.rpartition(".")[0]


def folder_graph(known: dict[str, Path]) -> Graph:
    graph: Graph = {}
    for name, targets in file_graph(known).items():
        mine = folder_of(name, known)
        graph.setdefault(mine, set()).update(t for t in map(lambda t: folder_of(t, known), targets) if t != mine)
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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


def _explain(graph: Graph, component: list[str]) -> str:
    edges = [f"{a} -> {b}" for a in component for b in sorted(graph.get(a, ())) if b in component]
    return "\n  ".join(edges)


def test_no_cycle_between_files() -> None:
    graph = file_graph(modules())
    found = cycles(graph)
    assert not found, "\n".join(f"import cycle:\n  {_explain(graph, c)}" for c in found)


def test_no_cycle_between_folders() -> None:
    graph = folder_graph(modules())
    found = cycles(graph)
    assert not found, "\n".join(f"import cycle:\n  {_explain(graph, c)}" for c in found)


def test_the_walk_sees_a_cycle(tmp_path: Path) -> None:
    """The check itself: two files that import each other, one inside a function, are a cycle; an import under
    TYPE_CHECKING is not."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    known = modules(package)
    assert cycles(file_graph(known)) == [["pkg.a", "pkg.sub.b"]]
    assert cycles(folder_graph(known)) == [["pkg.a", "pkg.sub"]]
    assert file_graph(known)["pkg.c"] == set()
