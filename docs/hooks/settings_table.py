"""The configuration page's settings tables, generated at build time from `bot.config.Settings`.

`docs/operations/configuration.md` holds a marker; this mkdocs hook replaces it with one table per group of
settings, read from the pydantic model itself (file keys, environment variables, defaults, descriptions), so
the page says what the code does however the settings are grouped.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

PAGE = "operations/configuration.md"
MARKER = "<!-- settings-table -->"


@dataclass(frozen=True)
class Setting:
    key: str  # the key inside its table of the config file
    environment: tuple[str, ...]  # the variables that set it, the preferred name first
    default: str
    description: str


@dataclass(frozen=True)
class Group:
    table: str  # the config file's table ("checkins", "llm.chat"); "" for the top level
    description: str
    settings: tuple[Setting, ...]


def setting_groups(model: type[BaseModel]) -> list[Group]:
    """Every setting of `model`, grouped as the config file's tables group them, top level first."""
    return list(_groups(model, (), "", _EnvNaming.of(model)))


def render(groups: list[Group]) -> str:
    """The groups as Markdown: a table of the top-level settings, then a section per table of the file."""
    parts = []
    for group in groups:
        if group.table:
            parts.append(f"### `[{group.table}]`\n\n{group.description}\n")
        rows = [
            f"| `{s.key}` | {', '.join(f'`{name}`' for name in s.environment) or '(file only)'} | {s.default} "
            f"| {_cell(s.description)} |"
            for s in group.settings
        ]
        parts.append("| setting | environment | default | meaning |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, *, page: Any, **_: Any) -> str:
    """mkdocs hook: put the tables in place of the marker on the configuration page."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its {MARKER} marker: the settings tables have nowhere to go")
    from bot.config import Settings

    return markdown.replace(MARKER, render(setting_groups(Settings)))


@dataclass(frozen=True)
class _EnvNaming:
    """How pydantic-settings names the variable of a field that declares none."""

    prefix: str
    nested_delimiter: str | None
    case_sensitive: bool

    @classmethod
    def of(cls, model: type[BaseModel], outer: _EnvNaming | None = None) -> _EnvNaming:
        if not issubclass(model, BaseSettings):
            return outer or cls("", None, False)
        config = model.model_config
        return cls(
            config.get("env_prefix") or "",
            config.get("env_nested_delimiter") or None,
            bool(config.get("case_sensitive")),
        )

    def variables(self, field: FieldInfo, path: tuple[str, ...]) -> tuple[str, ...]:
        declared = _declared_names(field)
        if declared:
            return tuple(declared if self.case_sensitive else [name.upper() for name in declared])
        if len(path) > 1 and self.nested_delimiter is None:
            return ()  # a key inside a table with no nested variables: set in the file only
        name = self.prefix + (self.nested_delimiter or "").join(path)
        return (name if self.case_sensitive else name.upper(),)


def _groups(model: type[BaseModel], path: tuple[str, ...], description: str, naming: _EnvNaming) -> Iterator[Group]:
    leaves, tables = [], []
    for name, field in model.model_fields.items():
        table = _model_of(field.annotation)
        if table is None:
            leaves.append(_setting(name, field, (*path, name), naming))
        else:
            tables.append((name, field, table))
    if leaves or not path:
        yield Group(".".join(path), description, tuple(leaves))
    for name, field, table in tables:
        about = field.description or (table.__doc__ or "").strip().splitlines()[0]
        yield from _groups(table, (*path, name), about, _EnvNaming.of(table, naming))


def _setting(name: str, field: FieldInfo, path: tuple[str, ...], naming: _EnvNaming) -> Setting:
    description = field.description or ""
    choices = _choices(field.annotation)
    if choices:
        description += f" (one of {', '.join(f'`{choice}`' for choice in choices)})"
    return Setting(name, naming.variables(field, path), _default(field), description)


def _declared_names(field: FieldInfo) -> list[str]:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if isinstance(extra.get("env"), str):  # `bot.config.env()`: our name, then the ecosystem's and the old ones
        return [str(name) for name in (extra["env"], *_listed(extra.get("also")), *_listed(extra.get("formerly")))]
    alias = field.validation_alias or field.alias
    if isinstance(alias, AliasChoices):
        return [choice for choice in alias.choices if isinstance(choice, str)]
    return [alias] if isinstance(alias, str) else []


def _listed(names: Any) -> list[Any]:
    return names if isinstance(names, list) else []


def _alternatives(annotation: Any) -> tuple[Any, ...]:
    """A type and, if it is a union (`X | None`), its members."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return (annotation, *typing.get_args(annotation))
    return (annotation,)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field's type is (or is optionally), if it is a table of settings rather than a value."""
    for candidate in _alternatives(annotation):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _choices(annotation: Any) -> tuple[Any, ...]:
    for candidate in _alternatives(annotation):
        if typing.get_origin(candidate) is typing.Literal:
            return typing.get_args(candidate)
        if isinstance(candidate, type) and issubclass(candidate, enum.Enum):
            return tuple(member.value for member in candidate)
    return ()


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]  # our factories take no arguments
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return _shown(value)


def _shown(value: Any) -> str:
    if value is None or isinstance(value, SecretStr):
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Path):
        home = str(Path.home())
        value = "~" + str(value)[len(home) :] if str(value).startswith(home) else str(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
