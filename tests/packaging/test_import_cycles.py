"""No import circle between files of the product (STYLE.md 21).

Every ``import`` and ``from … import`` of ``broker_core``, ``connector``, ``pyspark_rocketmq``
and ``spark_jobs`` counts, relative ones too, wherever it stands (inside functions and under
``TYPE_CHECKING`` as well: a circle hidden from the interpreter is still one concept split
in two). ``from pkg import name`` counts as an import of ``pkg/name.py`` when that file
exists, else of ``pkg/__init__.py``. A circle is a strongly connected component of more than
one file (or a file importing itself); the failure names its files.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker_core", "connector", "pyspark_rocketmq", "spark_jobs")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the product's packages."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.AST, package: str, modules: dict[str, Path]) -> Iterable[str]:
    """The product modules one import statement loads."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            name = alias.name
            while name and name not in modules:  # ``import a.b.c`` of a name inside a.b
                name = name.rpartition(".")[0]
            if name:
                yield name
    elif isinstance(node, ast.ImportFrom):
        base = _absolute(node, package)
        for alias in node.names:
            if f"{base}.{alias.name}" in modules:
                yield f"{base}.{alias.name}"
            elif base in modules:
                yield base


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """File (relative path) -> the product files it imports."""
    modules = module_files(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = _package_of(name, path)
        edges = graph.setdefault(str(path.relative_to(root)), set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _targets(node, package, modules):
                edges.add(str(modules[target].relative_to(root)))
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Every strongly connected component that is a circle (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
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
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(frozenset(component))
    return sorted(found, key=sorted)


def unallowed(found: list[frozenset[str]], allowed: Iterable[frozenset[str]]) -> list[str]:
    """One line per circle whose files are not all within one allowed circle."""
    ok = list(allowed)
    return [" <-> ".join(sorted(c)) for c in found if not any(c <= a for a in ok)]


def test_no_import_circles() -> None:
    bad = unallowed(circles(import_graph()), ())
    assert not bad, "import circles between files:\n" + "\n".join(bad)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_check_finds_circles_of_every_import_form(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "broker_core/__init__.py": "",
            "broker_core/a.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from broker_core.b import B\n",
            "broker_core/b.py": "def f() -> None:\n    from . import a\n",
            "broker_core/pkg/__init__.py": "",
            "broker_core/pkg/c.py": "import broker_core.pkg.d\n",
            "broker_core/pkg/d.py": "from ..pkg import c\n",
            "broker_core/e.py": "from broker_core import errors\n",
            "connector/__init__.py": "",
            "connector/x.py": "from .y import Y\n",
            "connector/y.py": "from connector import x\n",
        },
    )
    found = circles(import_graph(tmp_path))
    assert unallowed(found, ()) == [
        "broker_core/a.py <-> broker_core/b.py",
        "broker_core/pkg/c.py <-> broker_core/pkg/d.py",
        "connector/x.py <-> connector/y.py",
    ]
    assert unallowed(found, [frozenset({"connector/x.py", "connector/y.py"})]) == [
        "broker_core/a.py <-> broker_core/b.py",
        "broker_core/pkg/c.py <-> broker_core/pkg/d.py",
    ]


def test_an_allowed_circle_that_grows_fails(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "connector/__init__.py": "",
            "connector/x.py": "from .y import Y\n",
            "connector/y.py": "from .z import Z\n",
            "connector/z.py": "from . import x\n",
        },
    )
    found = circles(import_graph(tmp_path))
    assert unallowed(found, [frozenset({"connector/x.py", "connector/y.py"})]) == [
        "connector/x.py <-> connector/y.py <-> connector/z.py"
    ]
    shrunk_from = frozenset(
        {"connector/w.py", "connector/x.py", "connector/y.py", "connector/z.py"}
    )
    assert unallowed(found, [shrunk_from]) == []
