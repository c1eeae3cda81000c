"""Operator rules for a chat platform: which persona speaks where, who may talk, where every message counts.

A *place* is a platform id (a Discord server, channel or thread; a Telegram chat). Adapters describe
where a message came from as a `Place`: its conversation and the ids of its places from the most
specific to the broadest (thread, channel, server), so a channel's rule beats its server's. Runtime
choices made with `/persona` beat the config file.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from core.types import ConversationRef, UserRef


class PlaceRules(BaseModel):
    """One platform's table in the config file, e.g. `[discord]` or `[telegram]`."""

    model_config = ConfigDict(extra="forbid")

    personas: dict[int, str] = Field(
        default_factory=dict, description="place id (server, channel, thread, chat) -> persona id"
    )
    every_message: list[int] = Field(
        default_factory=list, description="channels or group chats where every message is answered, not only mentions"
    )
    allowed_users: list[int] = Field(default_factory=list, description="only these users (empty: everyone)")
    allowed_places: list[int] = Field(
        default_factory=list, description="only these servers, channels or group chats (empty: all)"
    )
    direct_messages: bool = Field(True, description="answer direct messages and private chats")

    def persona_for(self, places: Sequence[int]) -> str | None:
        """The configured persona of the most specific place that has one."""
        return next((self.personas[place] for place in places if place in self.personas), None)

    def allows(self, user_id: int | str, places: Sequence[int], *, direct: bool) -> bool:
        """Whether this user (the platform's own id) may talk to the companion here (`places` is empty for a
        direct message)."""
        if self.allowed_users and str(user_id) not in {str(allowed) for allowed in self.allowed_users}:
            return False
        if direct:
            return self.direct_messages
        return not self.allowed_places or any(place in self.allowed_places for place in places)

    def every_message_in(self, places: Sequence[int]) -> bool:
        return any(place in self.every_message for place in places)


class ChosenPersonas(Protocol):
    """Personas chosen at runtime with `/persona`, per place: a JSON file, or the shared database in server mode
    (`knowledge/journal/place_personas.py`)."""

    def get(self, places: Sequence[int]) -> str | None: ...

    def set(self, place: int, persona_id: str | None) -> None: ...

    def all(self) -> dict[int, str]: ...


class PersonaChoices:
    """Personas chosen at runtime with `/persona`, per place, kept in a small JSON file across restarts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
            self._choices = {int(place): str(persona) for place, persona in loaded.items()}
        except FileNotFoundError:
            self._choices = {}
        except (ValueError, AttributeError) as error:  # a hand-edited file gone wrong: say so, don't guess
            raise ValueError(f"{path}: not a JSON object of place id -> persona id ({error})") from error

    def get(self, places: Sequence[int]) -> str | None:
        return next((self._choices[place] for place in places if place in self._choices), None)

    def all(self) -> dict[int, str]:
        return dict(self._choices)

    def set(self, place: int, persona_id: str | None) -> None:
        """Choose a persona for a place; None goes back to the configured one."""
        with self._lock:
            if persona_id is None:
                self._choices.pop(place, None)
            else:
                self._choices[place] = persona_id
            self._save()

    def _save(self) -> None:
        # Write then rename, so a crash mid-write never leaves a half file.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".personas-")
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump({str(place): persona for place, persona in self._choices.items()}, file, indent=2)
        os.replace(temporary, self.path)


@dataclass(frozen=True, slots=True)
class Place:
    """Where a message or a command came from: its conversation, the ids the operator's rules name it by (most
    specific first; none for a Discord DM or the terminal), and whether it is private (only the user and the
    companion read it)."""

    conversation: ConversationRef
    ids: tuple[int, ...] = ()
    private: bool = True


class Router:
    """Answers the adapters' questions about a place: its persona, who may talk, what to answer.

    Without `choices`, no persona is chosen at runtime (the terminal's router: no rules, one persona)."""

    def __init__(self, rules: PlaceRules, choices: ChosenPersonas | None, default_persona: str) -> None:
        self.rules = rules
        self.choices = choices
        self.default_persona = default_persona

    def persona_for(self, places: Sequence[int]) -> str:
        chosen = self.choices.get(places) if self.choices is not None else None
        return chosen or self.rules.persona_for(places) or self.default_persona

    def allows(self, user: UserRef, place: Place) -> bool:
        """Whether the operator lets this user talk to the companion there."""
        return self.rules.allows(user.id, place.ids, direct=place.private)

    def answers_every_message(self, place: Place) -> bool:
        """Whether every message there is answered, not only those meant for the companion."""
        return self.rules.every_message_in(place.ids)
