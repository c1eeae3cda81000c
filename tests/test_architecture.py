"""Dependencies flow bot/ -> core/ -> knowledge/, and core/ never sees a platform."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "knowledge": {"core", "bot", "personas", "discord", "telegram", "click", "openai"},
    "core": {"bot", "discord", "telegram", "click", "chromadb", "sqlite3", "psycopg", "psycopg_pool", "yoyo"},
    "personas": {"core", "bot", "knowledge"},
}


def imported_modules(path: Path, *, full: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name if full else alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module if full else node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_packages_only_import_downstream(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_modules(path) & FORBIDDEN[package])
        for path in (ROOT / package).rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_core_does_not_know_which_backend_it_runs_on() -> None:
    """The SQLite and PostgreSQL backends are chosen in the composition root; core/ sees only the seams."""
    backends = {"knowledge.sql.sqlite", "knowledge.sql.postgres"}
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_modules(path, full=True) & backends)
        for path in (ROOT / "core").rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}
