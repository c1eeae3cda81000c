"""Dependencies flow bot/ -> core/ -> knowledge/, and core/ never sees a platform."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "knowledge": {"core", "bot", "personas", "discord", "telegram", "click", "openai"},
    "core": {"bot", "discord", "telegram", "click", "chromadb", "sqlite3", "psycopg", "psycopg_pool", "yoyo"},
    "personas": {"core", "bot", "knowledge"},
}


def imported_modules(path: Path, *, full: bool = False) -> set[str]:
    """The modules `path` imports: top-level packages, or (`full`) whole module names, a module imported from its
    package (`from core import phrasebook`) by its own name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name if full else alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not full:
                names.add(node.module.split(".")[0])
                continue
            folder = ROOT.joinpath(*node.module.split("."))
            for alias in node.names:
                is_module = (folder / f"{alias.name}.py").exists() or (folder / alias.name / "__init__.py").exists()
                names.add(f"{node.module}.{alias.name}" if is_module else node.module)
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


# Inside each layer, the wings keep to their own floors. A wing may import the modules a rule lists
# (and itself); each entry says why.
WING_RULES = {
    # pure functions of (record, now, policy): no storage, no search
    "knowledge/rules": {"knowledge.records", "knowledge.dates", "knowledge.rules"},
    "knowledge/dates": {"knowledge.dates"},
    # the storage seam knows rows, not what is stored in them
    "knowledge/sql": {"knowledge.records", "knowledge.errors", "knowledge.sql"},
    # the search engine indexes what it is given; it never reads a store of its own
    "knowledge/search": {
        "knowledge.records",
        "knowledge.dates",
        "knowledge.rules",
        "knowledge.search",
        "knowledge.sql",
    },
    # the reply path never waits for, or even sees, the background roles
    "core/reply": {
        "core.phrasebook",
        "core.clock",
        "core.errors",
        "core.types",
        "core.llm",
        "core.reply",
        "knowledge",
        "personas",
    },
    "core/llm": {"core.errors", "core.types", "core.clock", "core.llm", "personas"},
    # platforms are surfaces: they reach core/ through its facade (and the values and words it shares with them),
    # and are given what they need: never the composition root or the command line
    "bot/platforms": {
        "bot.ordering",
        "bot.routing",
        "bot.platforms",
        "core.companion",
        "core.types",
        "core.errors",
        "core.phrasebook",
        "knowledge.records",
        "knowledge.errors",  # the storage errors every layer reads instead of a driver's (an outage is held)
    },
}


def _allowed(module: str, allowed: set[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in allowed)


@pytest.mark.parametrize("wing", sorted(WING_RULES))
def test_wings_import_only_what_their_rule_allows(wing: str) -> None:
    ours = ("bot", "core", "knowledge", "personas")
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name
            for name in imported_modules(path, full=True)
            if name.split(".")[0] in ours and not _allowed(name, WING_RULES[wing])
        )
        for path in (ROOT / wing).rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_no_folder_keeps_more_than_twelve_modules() -> None:
    """A room past a dozen modules needs wings: a newcomer reads a folder's names to find their way."""
    crowded = {
        str(folder.relative_to(ROOT)): count
        for package in ("bot", "core", "knowledge", "personas")
        for folder in [ROOT / package, *(ROOT / package).rglob("*/")]
        if folder.is_dir() and (count := len([f for f in folder.glob("*.py") if f.name != "__init__.py"])) > 12
    }
    assert crowded == {}


def test_every_wing_has_a_map() -> None:
    """Each sub-package's `__init__.py` docstring says what its modules are for."""
    missing = [
        str(init.relative_to(ROOT))
        for package in ("bot", "core", "knowledge")
        for init in (ROOT / package).rglob("__init__.py")
        if not (ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or "").strip()
    ]
    assert missing == []


def test_bot_calls_the_companion_not_its_collaborators() -> None:
    """bot/ asks the `Companion` facade by methods that say what they do, never through the companion's parts
    (`companion.forgetting...`, `companion.checkins...`): the platforms only that way, while the maintenance and
    the operator's command line use the services `bot/app.py` built (`app.knowledge`, `app.editor`...)."""
    from core.companion import Companion

    reached = {
        f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}"
        for path in (ROOT / "bot").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and _names_the_companion(node.value)
        if not inspect.isfunction(getattr(Companion, node.attr, None))
    }
    assert reached == set()


def _names_the_companion(node: ast.expr) -> bool:
    """`companion`, `self.companion`, `self._companion`, `context.companion`..."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.lstrip("_") == "companion"
