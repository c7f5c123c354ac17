"""The layer rules, checked on the AST of every module (imports inside functions count too).

- ``broker_core/protocol/`` imports nothing of ours but the leaf modules errors and message;
- ``broker_core/client/``, ``connector/`` and ``spark_jobs/`` never import store, broker or server;
- ``store`` imports neither broker nor server; ``broker`` does not import server;
- the front ends (``server``, ``remoting_broker``) never import the store's batch or codec
  (``store.columns``, ``store.codec``): they hand the broker its own batch
  (``broker/batch.py``), which the broker turns into the store's.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_UPPER = ("broker_core.store", "broker_core.broker", "broker_core.server")
_STORE_BATCH = ("broker_core.store.columns", "broker_core.store.codec")
RULES: dict[str, tuple[str, ...]] = {
    "broker_core/client": _UPPER,
    "connector": _UPPER,
    "spark_jobs": _UPPER,
    "broker_core/store": ("broker_core.broker", "broker_core.server"),
    "broker_core/broker": ("broker_core.server",),
    "broker_core/server": _STORE_BATCH,
    "broker_core/remoting_broker": _STORE_BATCH,
}
PROTOCOL_MAY_IMPORT = ("broker_core.errors", "broker_core.message", "broker_core.protocol")


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import statement in ``path``."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(folder: str, forbidden: tuple[str, ...], root: Path = ROOT) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line} imports {module}"
        for path in sorted((root / folder).rglob("*.py"))
        for line, module in imported_modules(path, root)
        if _within(module, forbidden)
    ]


@pytest.mark.parametrize("folder", sorted(RULES))
def test_layer_rules_hold(folder: str) -> None:
    assert violations(folder, RULES[folder]) == []


def test_protocol_imports_nothing_of_ours() -> None:
    ours = [
        (p, line, m)
        for p in sorted((ROOT / "broker_core/protocol").rglob("*.py"))
        for line, m in imported_modules(p)
        if _within(m, ("broker_core", "connector"))
        and m != "broker_core"
        and not _within(m, PROTOCOL_MAY_IMPORT)
    ]
    assert ours == []


def test_the_check_finds_a_violation(tmp_path: Path) -> None:
    probe = tmp_path / "broker_core" / "client" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("def f() -> None:\n    from ..store import codec\n")
    assert violations("broker_core/client", _UPPER, tmp_path) == [
        "broker_core/client/probe.py:2 imports broker_core.store",
        "broker_core/client/probe.py:2 imports broker_core.store.codec",
    ]
