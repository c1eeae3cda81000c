"""Persona files: YAML data in `personas/`, validated into `Persona` objects."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

PERSONA_DIR = Path(__file__).parent
DEFAULT_PERSONA_ID = "xiaoxiang"
_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class PersonaError(Exception):
    """A persona file is missing or broken; the message names the file and the field."""


class ExampleExchange(BaseModel):
    """One example of how the character answers."""

    model_config = ConfigDict(extra="forbid")

    user: str = Field(min_length=1)
    character: str = Field(min_length=1)


class Persona(BaseModel):
    """A character the companion can play."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str = Field(min_length=1)
    language: str = "en"
    user_title: str = Field(default="you", description="how the character addresses the user")
    personality: str = Field(min_length=1)
    speaking_style: str = ""
    greetings: list[str] = Field(min_length=1)
    example_dialogue: list[ExampleExchange] = []
    system_memories: list[str] = Field(default=[], description="facts about the character, read-only")
    memory_rules: dict[str, float] = Field(
        default={}, description="overrides of the memory lifecycle numbers (decay factors, thresholds)"
    )

    @field_validator("id")
    @classmethod
    def _id_is_a_slug(cls, value: str) -> str:
        if not _SLUG.match(value):
            raise ValueError("must be a lowercase ASCII slug such as 'xiaoxiang' (a-z, 0-9, '-', '_')")
        return value

    @field_validator("greetings", "system_memories")
    @classmethod
    def _no_blank_entries(cls, values: list[str]) -> list[str]:
        if any(not value.strip() for value in values):
            raise ValueError("entries must not be empty")
        return values


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = "missing" if item["type"] == "missing" else item["msg"]
        problems.append(f"{where}: {message}")
    return "; ".join(problems)


def load_persona(path: Path) -> Persona:
    """Read and validate one persona file; the file name must match its id."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise PersonaError(f"{path.name}: cannot be read ({error.strerror})") from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise PersonaError(f"{path.name}: not valid YAML{where}") from error
    if not isinstance(data, dict):
        raise PersonaError(f"{path.name}: expected a mapping of fields at the top level")
    try:
        persona = Persona.model_validate(data)
    except ValidationError as error:
        raise PersonaError(f"{path.name}: {_describe(error)}") from error
    if path.stem != persona.id:
        raise PersonaError(f"{path.name}: id: {persona.id!r} does not match the file name {path.stem!r}")
    return persona


class PersonaRegistry:
    """The personas of one directory, looked up by id."""

    def __init__(self, directory: Path = PERSONA_DIR) -> None:
        self.directory = directory
        self._cache: dict[str, tuple[float, Persona]] = {}

    def ids(self) -> list[str]:
        """The ids of the persona files present."""
        return sorted(path.stem for path in self.directory.glob("*.yaml"))

    def load(self, persona_id: str) -> Persona:
        """Load one persona by id, with an error that lists the known ones."""
        path = self.directory / f"{persona_id}.yaml"
        if not _SLUG.match(persona_id) or not path.exists():
            known = ", ".join(self.ids()) or "none"
            raise PersonaError(f"unknown persona {persona_id!r} (known: {known})")
        return load_persona(path)

    def get(self, persona_id: str) -> Persona:
        """Like `load`, but re-reads the file only when it changed."""
        path = self.directory / f"{persona_id}.yaml"
        mtime = path.stat().st_mtime if path.exists() else -1.0
        cached = self._cache.get(persona_id)
        if cached is None or cached[0] != mtime:
            cached = (mtime, self.load(persona_id))
            self._cache[persona_id] = cached
        return cached[1]
