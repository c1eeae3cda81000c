"""The data the knowledge layer stores: scopes, memory records and changes to them, messages."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from enum import Enum
from typing import Any, Final, Literal, get_args

Category = Literal["system", "core", "fact", "episode", "chapter"]
Source = Literal["user", "background_ai", "system"]
ReviewKind = Literal["promote", "decay"]
MessageRole = Literal["user", "assistant"]
CATEGORIES: tuple[str, ...] = get_args(Category)
SOURCES: tuple[str, ...] = get_args(Source)


@dataclass(frozen=True, slots=True)
class Scope:
    """One (persona, user) pair: the unit nothing may cross."""

    persona_id: str
    user_id: str  # platform-qualified: "discord:99", "telegram:7", "cli:alice"

    def __post_init__(self) -> None:
        if not self.persona_id or not self.user_id:
            raise ValueError("a scope needs both a persona id and a user id")

    def __str__(self) -> str:
        return f"{self.persona_id}/{self.user_id}"


def new_memory_id() -> str:
    """A fresh memory id, `mem_<hex>`."""
    return f"mem_{uuid.uuid4().hex[:12]}"


def derived_memory_id(*parts: str) -> str:
    """The memory id that `parts` (say, the messages an episode sums up) always give, `mem_<hex>`."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
    return f"mem_{digest[:12]}"


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One memory with the metadata of docs/development/design-rules.md#memory-records.

    Frozen because the store hands out records that its scope snapshots share; a change is a
    `dataclasses.replace`. A record read from the store carries its importance as of the moment of
    the read (`importance`), derived from what is stored: `base_importance`, the importance it had at
    `last_access`.
    """

    id: str
    scope: Scope
    content: str
    category: Category
    importance: float
    created_at: datetime
    last_access: datetime
    source: Source
    verified: bool = False
    topic: str | None = None
    conversation_id: str | None = None
    message_ids: tuple[str, ...] = ()
    base_importance: float | None = None  # None: the same as `importance` (a record not decayed yet)
    review_pending: ReviewKind | None = None  # a review is queued; don't queue another
    decay_kept: bool = False  # kept by a decay review; re-armed when a boost lifts it above the threshold
    hits: int = 0  # how often it really shaped a reply (boosts)
    learned_in: str | None = None  # the group conversation it was learned in; None: a private chat
    shared: bool = False  # the user let it be used in every group, wherever it was learned
    # Time (docs/development/design-rules.md#time); None everywhere in stores written before these existed.
    about: datetime | None = None  # the moment a plan or event refers to ("the interview, Mon 30 Nov 10:00")
    until: datetime | None = None  # when a state ends, or ended: the moment a changed fact stopped being true
    replaced_by: str | None = None  # the memory that holds the new value of a fact that changed
    changed_at: datetime | None = None  # when the content last changed; None: as learned (`created_at`)
    review_retry_at: datetime | None = None  # a requested review that has not run by then is asked again

    def __post_init__(self) -> None:
        if self.base_importance is None:
            object.__setattr__(self, "base_importance", self.importance)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready view, used by inspection commands."""
        return {
            "id": self.id,
            "persona_id": self.scope.persona_id,
            "user_id": self.scope.user_id,
            "content": self.content,
            "category": self.category,
            "importance": round(self.importance, 4),
            "created_at": self.created_at.isoformat(),
            "last_access": self.last_access.isoformat(),
            "source": self.source,
            "verified": self.verified,
            "topic": self.topic,
            "conversation_id": self.conversation_id,
            "message_ids": list(self.message_ids),
            "base_importance": round(self.base_importance or 0.0, 4),
            "review_pending": self.review_pending,
            "decay_kept": self.decay_kept,
            "hits": self.hits,
            "learned_in": self.learned_in,
            "shared": self.shared,
            "about": _iso(self.about),
            "until": _iso(self.until),
            "replaced_by": self.replaced_by,
            "changed_at": _iso(self.changed_at),
        }

    @property
    def dated(self) -> datetime:
        """When what it says was learned or last changed."""
        return self.changed_at or self.created_at


class Edit(Enum):
    """What a `MemoryChange` does to a field it gives no new value."""

    KEEP = "keep"
    CLEAR = "clear"


KEEP: Final = Edit.KEEP  # the field stays as stored
CLEAR: Final = Edit.CLEAR  # the field loses its value: a date, a pending review
Keep = Literal[Edit.KEEP]
Clear = Literal[Edit.CLEAR]


@dataclass(frozen=True, slots=True)
class MemoryChange:
    """New values for some fields of one stored memory: what every writer hands `KnowledgeBase.update`
    (a turn's ops, a review's verdict, an operator's edit, an import, `/share`).

    A field left at `KEEP` stays as stored; `CLEAR` takes away a value a memory may lack. A new
    `importance` is the new base that decay counts from `last_access`.
    """

    content: str | Keep = KEEP
    category: Category | Keep = KEEP
    importance: float | Keep = KEEP
    last_access: datetime | Keep = KEEP
    verified: bool | Keep = KEEP
    hits: int | Keep = KEEP
    decay_kept: bool | Keep = KEEP
    shared: bool | Keep = KEEP
    review_pending: ReviewKind | Clear | Keep = KEEP
    review_retry_at: datetime | Keep = KEEP
    about: datetime | Clear | Keep = KEEP
    until: datetime | Clear | Keep = KEEP
    replaced_by: str | Keep = KEEP
    changed_at: datetime | Keep = KEEP

    def values(self) -> dict[str, Any]:
        """The fields this change sets, by name, a cleared one as None: empty if it changes nothing."""
        return {
            field.name: None if value is CLEAR else value
            for field in fields(self)
            if (value := getattr(self, field.name)) is not KEEP
        }

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> MemoryChange:
        """The change whose `values()` these are."""
        fields: dict[str, Any] = {name: CLEAR if value is None else value for name, value in values.items()}
        return cls(**fields)

    def applied_to(self, record: MemoryRecord) -> MemoryRecord:
        """`record` as this change leaves it."""
        values = self.values()
        if "importance" in values:
            values["base_importance"] = values["importance"]
        return replace(record, **values)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


@dataclass(frozen=True, slots=True)
class ScoredMemory:
    """A search hit: the record, how close it is in meaning and how relevant overall (higher is better)."""

    record: MemoryRecord
    similarity: float  # cosine similarity of the embeddings: what duplicate and "about" thresholds compare
    relevance: float = 0.0  # the hybrid engine's fused score, 0..1 relative to the other hits: hits come in its order


def new_message_id() -> str:
    """A fresh message id, `msg_<hex>`."""
    return f"msg_{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message of a conversation as working memory keeps it."""

    id: str
    persona_id: str
    conversation_id: str
    user_id: str
    role: MessageRole
    speaker_name: str
    content: str
    sent_at: datetime
    in_group: bool = False  # said in a group chat (the conversation), not in private
