"""Persona files: YAML or TOML data in `personas/`, validated into `Persona` objects."""

from __future__ import annotations

import logging
import math
import re
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from personas.lorebook import Lorebook

log = logging.getLogger(__name__)

PERSONA_DIR = Path(__file__).parent
DEFAULT_PERSONA_ID = "xiaoxiang"
PERSONA_SUFFIXES = (".yaml", ".toml")  # a persona file's suffix says how it is read
_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
ID_RULE = "a lowercase ASCII slug such as 'xiaoxiang' (a-z, 0-9, '-', '_')"
# Character Card macros; <BOT> and <USER> are the older spelling of the same.
_CHAR_MACRO = re.compile(r"\{\{char\}\}|<bot>", re.IGNORECASE)
_USER_MACRO = re.compile(r"\{\{user\}\}|<user>", re.IGNORECASE)
RoleName = Literal["chat", "monitor", "summarizer", "reviewer"]  # core.types.Role; personas import nothing from core


class PersonaError(Exception):
    """A persona file is missing or broken; the message names the file and the field."""


class ExampleExchange(BaseModel):
    """One example of how the character answers."""

    model_config = ConfigDict(extra="forbid")

    user: str = ""  # empty: the character speaks first
    character: str = Field(min_length=1)


class ModelChoice(BaseModel):
    """A persona's choice of model for one role, over the configured one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    vision: bool | None = None  # the model accepts images (a persona on a vision model, or not)
    tools: bool | None = None  # the model may call tools (`recall`): false turns them off for this persona


class Persona(BaseModel):
    """A character the companion can play. Text fields may use the `{{char}}` and `{{user}}` macros."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str = Field(min_length=1)
    language: str = "en"
    user_title: str | None = Field(default=None, description="how the character addresses the user; None: by name")
    description: str = Field(default="", description="who the character is")
    personality: str = Field(default="", validate_default=True)
    speaking_style: str = ""
    scenario: str = ""
    greetings: list[str] = Field(min_length=1)
    example_dialogue: list[ExampleExchange] | str = Field(
        default=[], description="exchanges, or a card's transcript (<START> blocks of '{{user}}:' / '{{char}}:' lines)"
    )
    system_prompt: str = Field(default="", description="instructions placed first in the prompt")
    post_history_instructions: str = Field(default="", description="instructions placed after the conversation")
    system_memories: list[str] = Field(default=[], description="facts about the character, read-only")
    memory_rules: dict[str, float] = Field(
        default={}, description="overrides of the memory lifecycle numbers (decay factors, thresholds)"
    )
    models: dict[RoleName, ModelChoice] = Field(default={}, description="model and temperature per role")
    daily_tokens: int | None = Field(
        default=None, ge=0, description="tokens a user's replies may take in a day (0: no limit; None: the setting's)"
    )
    lorebook: Lorebook | None = None
    card: dict[str, Any] = Field(default={}, description="an imported card's fields that have no place above")

    @field_validator("id")
    @classmethod
    def _id_is_a_slug(cls, value: str) -> str:
        if not _SLUG.match(value):
            raise ValueError(f"must be {ID_RULE}")
        return value

    @field_validator("personality")
    @classmethod
    def _described(cls, value: str, info: ValidationInfo) -> str:
        if not value.strip() and not str(info.data.get("description", "")).strip():
            raise ValueError("missing (give a personality, a description or both)")
        return value

    @field_validator("greetings", "system_memories")
    @classmethod
    def _no_blank_entries(cls, values: list[str]) -> list[str]:
        if any(not value.strip() for value in values):
            raise ValueError("entries must not be empty")
        return values

    def title_for(self, user_name: str | None = None) -> str:
        """How the character addresses the user: its `user_title`, else their name."""
        return self.user_title or user_name or "the user"

    def fill(self, text: str, user_name: str | None = None) -> str:
        """`text` with `{{char}}` and `{{user}}` replaced, for this user."""
        text = _CHAR_MACRO.sub(lambda _: self.name, text)
        return _USER_MACRO.sub(lambda _: self.title_for(user_name), text)


def describe_errors(error: ValidationError) -> str:
    """Pydantic's errors as "field: problem; field: problem"."""
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = "missing" if item["type"] == "missing" else item["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}")
    return "; ".join(problems)


def _fields(path: Path) -> object:
    """A persona file's data, as YAML or TOML by its suffix."""
    if path.suffix not in PERSONA_SUFFIXES:
        raise PersonaError(f"{path.name}: not a persona file (name it <id>.yaml or <id>.toml)")
    try:
        text = path.read_text(encoding="utf-8")
        return tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except OSError as error:
        raise PersonaError(f"{path.name}: cannot be read ({error.strerror})") from error
    except UnicodeDecodeError as error:
        raise PersonaError(f"{path.name}: not UTF-8 text (byte {error.start}; a binary file?)") from error
    except tomllib.TOMLDecodeError as error:
        raise PersonaError(f"{path.name}: not valid TOML: {error}") from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise PersonaError(f"{path.name}: not valid YAML{where}") from error


def load_persona(path: Path) -> Persona:
    """Read and validate one persona file (`<id>.yaml` or `<id>.toml`); the file name must match its id."""
    data = _fields(path)
    if not isinstance(data, dict):
        raise PersonaError(f"{path.name}: expected a mapping of fields at the top level")
    try:
        persona = Persona.model_validate(data)
    except ValidationError as error:
        raise PersonaError(f"{path.name}: {describe_errors(error)}") from error
    if path.stem != persona.id:
        raise PersonaError(f"{path.name}: id: {persona.id!r} does not match the file name {path.stem!r}")
    return persona


class _BlockStyleDumper(yaml.SafeDumper):
    """Writes multi-line text as `|` blocks, the way a person would write a persona file."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_BlockStyleDumper.add_representer(str, _represent_text)


def persona_yaml(persona: Persona) -> str:
    """The persona as a YAML file, with only the fields that were given."""
    data = persona.model_dump(mode="json", exclude_unset=True)
    return yaml.dump(data, Dumper=_BlockStyleDumper, allow_unicode=True, sort_keys=False, width=110)


_Version = tuple[tuple[Path, float], ...]  # a persona's files as last seen, each with its modification time


class PersonaRegistry:
    """The personas of one or more directories, looked up by id; the first directory with a file wins.

    The operator's own directory comes first, the bundled personas last, so an imported or edited
    persona with a bundled id replaces the bundled one without touching the installed files.
    """

    def __init__(
        self, *directories: Path, recheck_after: float = 1.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        """`recheck_after`: seconds a persona is served without looking at its file again (a turn asks
        several times; each look is a few `stat` calls)."""
        self.directories = directories or (PERSONA_DIR,)
        self._cache: dict[str, tuple[_Version, Persona]] = {}
        self._broken: dict[str, _Version] = {}  # the broken version last warned about
        self._recheck_after = recheck_after
        self._monotonic = monotonic
        self._checked: dict[str, float] = {}  # when each persona's file was last looked at

    @property
    def directory(self) -> Path:
        """Where new persona files go: the first directory."""
        return self.directories[0]

    def ids(self) -> list[str]:
        """The ids of the persona files present, as their names give them (a name that is no valid id has no `path`)."""
        found = {path.stem for d in self.directories for path in d.glob("*") if path.suffix in PERSONA_SUFFIXES}
        return sorted(found)

    def files(self, persona_id: str) -> list[Path]:
        """The files of the first directory that has any for `persona_id`: one, or more for `path` to refuse."""
        if not _SLUG.match(persona_id):
            return []
        for directory in self.directories:
            found = [path for end in PERSONA_SUFFIXES if (path := directory / f"{persona_id}{end}").exists()]
            if found:
                return found
        return []

    def path(self, persona_id: str) -> Path | None:
        """The file that defines `persona_id`, if any; two in one directory (`mia.yaml`, `mia.toml`) are an error."""
        files = self.files(persona_id)
        if len(files) > 1:
            names = " and ".join(path.name for path in files)
            raise PersonaError(f"{names} in {files[0].parent} both define persona {persona_id!r}; keep one of them")
        return files[0] if files else None

    def load(self, persona_id: str) -> Persona:
        """Load one persona by id, with an error that lists the known ones."""
        path = self.path(persona_id)
        if path is None:
            known = ", ".join(self.ids()) or "none"
            raise PersonaError(f"unknown persona {persona_id!r} (known: {known})")
        return load_persona(path)

    def get(self, persona_id: str) -> Persona:
        """Like `load`, but re-reads the file only when it changed (looking at most every `recheck_after` s).

        A file that breaks while in use (a half-saved edit, a bad paste) does not stop the persona: the
        version loaded last keeps serving, with a warning, until the file is fixed.
        """
        cached = self._cache.get(persona_id)
        now = self._monotonic()
        if cached is not None and now - self._checked.get(persona_id, -math.inf) < self._recheck_after:
            return cached[1]
        self._checked[persona_id] = now
        version = tuple((path, path.stat().st_mtime) for path in self.files(persona_id))
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            persona = self.load(persona_id)
        except PersonaError as error:
            if cached is None:
                raise
            if self._broken.get(persona_id) != version:
                self._broken[persona_id] = version
                log.warning("%s; still using the version loaded before", error)
            return cached[1]
        self._cache[persona_id] = (version, persona)
        return persona
