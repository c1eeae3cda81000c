"""The documentation keeps up with the code: what the code cites exists, and the generated parts cover it all.

The site itself is built with `mkdocs build --strict` by `make test`, which fails on a broken link or anchor
between pages; these tests check what mkdocs does not see: the citations in code, the README, and the hooks
that generate the settings tables and the wing maps.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Literal

import pytest
import yaml
from markdown.extensions.toc import slugify
from pydantic import AliasChoices, BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CODE = ("bot", "core", "knowledge", "personas", "tests", "bench", "docs/hooks")
CODE_SUFFIXES = {".py", ".yaml", ".yml", ".toml", ".sql"}
DOCS_CITATION = re.compile(r"docs/((?:[\w-]+/)*[\w-]+\.md)(?:#([\w-]+))?")
# The original design documents are not in the repository: code cites the docs page that states the rule.
DIRECT_CITATIONS = (re.compile(r"\bDESIGN\b|§"), re.compile(r"\bseeds?[\s_-]*\d{3}\b", re.IGNORECASE))
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")
README_LINES = 150


def load_hook(name: str) -> ModuleType:
    """A hook of mkdocs.yml, loaded by path as mkdocs loads it."""
    path = DOCS / "hooks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"docs_hook_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def page_markdown(page: Path) -> str:
    """A page's Markdown as mkdocs renders it: with what the hooks generate."""
    markdown = page.read_text(encoding="utf-8")
    config = SimpleNamespace(config_file_path=str(ROOT / "mkdocs.yml"))
    file = SimpleNamespace(src_uri=page.relative_to(DOCS).as_posix())
    for hook in yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["hooks"]:
        markdown = load_hook(Path(hook).stem).on_page_markdown(markdown, page=SimpleNamespace(file=file), config=config)
    return markdown


def anchors(page: Path) -> set[str]:
    """The ids of a page's headings, made as mkdocs' toc makes them (a repeated one gets `_1`, `_2`, ...)."""
    found: set[str] = set()
    fenced = False
    for line in page_markdown(page).splitlines():
        if line.startswith(("```", "~~~")):
            fenced = not fenced
        heading = None if fenced else re.match(r"#{1,6}\s+(.+?)\s*$", line)
        if heading:
            anchor = slugify(re.sub(r"[`*_]|\[([^]]*)\]\([^)]*\)", r"\1", heading[1]), "-")
            unique, n = anchor, 0
            while unique in found:
                n += 1
                unique = f"{anchor}_{n}"
            found.add(unique)
    return found


def code_files() -> list[Path]:
    files = [path for folder in CODE for path in (ROOT / folder).rglob("*") if path.suffix in CODE_SUFFIXES]
    return sorted(path for path in files if path != Path(__file__) and "__pycache__" not in path.parts)


def test_code_cites_only_docs_pages_and_anchors_that_exist() -> None:
    broken = []
    for path in code_files():
        for page, anchor in DOCS_CITATION.findall(path.read_text(encoding="utf-8")):
            target = DOCS / page
            if not target.is_file() or (anchor and anchor not in anchors(target)):
                broken.append(f"{path.relative_to(ROOT)}: docs/{page}{'#' + anchor if anchor else ''}")
    assert broken == []


def test_code_cites_docs_instead_of_the_original_design_documents() -> None:
    direct = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in code_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if any(pattern.search(line) for pattern in DIRECT_CITATIONS)
    ]
    assert direct == [], "cite docs/development/design-rules.md#<rule> (or another page of docs/) instead"


def test_the_citation_check_notices_a_missing_page_a_missing_anchor_and_a_direct_citation() -> None:
    rules = DOCS / "development" / "design-rules.md"
    assert "decay" in anchors(rules) and "no-such-rule" not in anchors(rules)
    assert DOCS_CITATION.findall("see docs/development/design-rules.md#no-such-rule.") == [
        ("development/design-rules.md", "no-such-rule")
    ]
    assert not (DOCS / "development" / "nowhere.md").exists()
    assert all(pattern.search(text) for pattern, text in zip(DIRECT_CITATIONS, ["DESIGN §3.1", "seed 004"]))
    assert not any(pattern.search("a seeded random.Random(seed)") for pattern in DIRECT_CITATIONS)


def test_the_readme_stays_short_and_its_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_LINES
    broken = []
    for link in MARKDOWN_LINK.findall(readme):
        if "://" in link:
            continue
        target, _, anchor = link.partition("#")
        path = ROOT / target
        if not path.exists() or (anchor and anchor not in anchors(path)):
            broken.append(link)
    assert broken == []


class _Table(BaseModel):
    """A table of the config file."""

    size: int = Field(3, description="how big")


class _Sample(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="APP_", env_nested_delimiter="__")

    name: str = Field("x", validation_alias=AliasChoices("APP_NAME", "OLD_NAME"), description="the name")
    mode: Literal["a", "b"] = Field("a", description="how | why")
    home: Path = Field(default_factory=lambda: Path.home() / "data", description="where")
    token: SecretStr | None = Field(None, description="a secret")
    every: float = Field(30.0, description="minutes")
    table: _Table = Field(default_factory=_Table, description="a group")


def test_settings_tables_come_from_the_model_groups_aliases_and_defaults_included() -> None:
    hook = load_hook("settings_table")
    setting = hook.Setting
    assert hook.setting_groups(_Sample) == [
        hook.Group(
            "",
            "",
            (
                setting("name", ("APP_NAME", "OLD_NAME"), "`x`", "the name"),
                setting("mode", ("APP_MODE",), "`a`", "how | why (one of `a`, `b`)"),
                setting("home", ("APP_HOME",), "`~/data`", "where"),
                setting("token", ("APP_TOKEN",), "unset", "a secret"),
                setting("every", ("APP_EVERY",), "`30`", "minutes"),
            ),
        ),
        hook.Group("table", "a group", (setting("size", ("APP_TABLE__SIZE",), "`3`", "how big"),)),
    ]
    rendered = hook.render(hook.setting_groups(_Sample))
    assert "### `[table]`" in rendered
    assert "| `mode` | `APP_MODE` | `a` | how \\| why (one of `a`, `b`) |" in rendered


def test_a_table_without_nested_variables_is_set_in_the_file_only() -> None:
    class Plain(BaseSettings):
        table: _Table = Field(default_factory=_Table)

    hook = load_hook("settings_table")
    groups = hook.setting_groups(Plain)
    size = hook.Setting("size", (), "`3`", "how big")
    assert groups[1] == hook.Group("table", "A table of the config file.", (size,))
    assert "| `size` | (file only) |" in hook.render(groups)


def test_the_configuration_page_lists_every_setting_of_the_companion() -> None:
    from bot.config import Settings

    page = page_markdown(DOCS / "operations" / "configuration.md").replace("\\|", "|")
    for name, field in Settings.model_fields.items():
        assert f"| `{name}` |" in page or f"### `[{name}]`" in page, name
        assert " ".join((field.description or "").split()) in page, name


def test_the_tables_name_the_variables_the_companion_declares_old_ones_after() -> None:
    from bot.config import Settings

    groups = {group.table: group for group in load_hook("settings_table").setting_groups(Settings)}
    names = {setting.key: setting.environment for setting in groups["telegram"].settings}
    assert names["token"] == ("COMPANION_TELEGRAM_TOKEN", "TELEGRAM_TOKEN")
    assert names["streaming"] == ("COMPANION_TELEGRAM_STREAMING",) and names["personas"] == ()
    assert {setting.key: setting.environment for setting in groups["llm"].settings}["base_url"] == (
        "COMPANION_LLM_BASE_URL",
        "OPENAI_BASE_URL",
    )


def test_a_page_that_lost_its_marker_fails_the_build() -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_uri="operations/configuration.md"))
    with pytest.raises(ValueError, match="marker"):
        load_hook("settings_table").on_page_markdown("# Configuration\n", page=page)
    other = SimpleNamespace(file=SimpleNamespace(src_uri="index.md"))
    assert load_hook("settings_table").on_page_markdown("# Home\n", page=other) == "# Home\n"


def test_the_architecture_page_carries_every_wing_map() -> None:
    page = page_markdown(DOCS / "development" / "architecture.md")
    for init in (ROOT / "core").rglob("__init__.py"):
        folder = init.parent.relative_to(ROOT).as_posix()
        assert f"### `{folder}/`" in page
    assert "`knowledge/rules/`" in page and "`decay.py`" in page
