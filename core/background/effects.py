"""The writes a background job makes to memory, as data: planned first, saved with the job, then applied.

A role decides everything a job will write before writing any of it (reads only), saves that plan in
the job's checkpoint, and only then applies it, one effect at a time, counting the effects applied, or
all at once, a call to the store for each kind of write (`apply_at_once`, for a night's many writes).
Every effect is idempotent: a new memory has the id it was planned with (applied twice, it is
written once), a change sets values instead of adding to them, a deletion of what is gone does
nothing, and a change-log row recorded twice is kept once. So a job that dies anywhere and runs again
applies each effect exactly once: no duplicate memory, no double boost, no lost op.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

from core.background.checkpoint import Checkpoint, Stage
from knowledge.journal.change_log import ChangeLog, LoggedChange
from knowledge.journal.ongoing_threads import OngoingThreads
from knowledge.memory.store import KnowledgeBase
from knowledge.records import Category, MemoryChange, MemoryRecord, Scope, Source

__all__ = ["AddMemory", "ChangeMemory", "DeleteMemory", "Effect", "MemoryWriter", "OpenThread", "ThreadNews"]


@dataclass(frozen=True)
class AddMemory:
    """A new memory, under the id chosen when it was planned."""

    memory_id: str
    content: str
    category: Category
    source: Source
    importance: float
    verified: bool = False
    conversation_id: str | None = None
    message_ids: tuple[str, ...] = ()
    learned_in: str | None = None  # the group it was learned in; None: a private chat
    about: datetime | None = None  # the moment a plan or event refers to
    until: datetime | None = None  # when a state ends


@dataclass(frozen=True)
class ChangeMemory:
    """A change to a memory, and its history row."""

    memory_id: str
    change: MemoryChange
    logged: LoggedChange | None = None


@dataclass(frozen=True)
class DeleteMemory:
    """A memory deleted, and its history row."""

    memory_id: str
    logged: LoggedChange | None = None


@dataclass(frozen=True)
class OpenThread:
    """A new ongoing thread, under the id chosen when it was planned."""

    thread_id: str
    title: str
    news: str
    since: datetime
    at: datetime
    message_ids: tuple[str, ...] = ()
    place: str | None = None  # the group it was learned in; None: a private chat


@dataclass(frozen=True)
class ThreadNews:
    """The latest news of an ongoing thread; with `close`, its end."""

    thread_id: str
    news: str
    at: datetime
    message_ids: tuple[str, ...] = ()
    place: str | None = None
    close: bool = False


Effect: TypeAlias = AddMemory | ChangeMemory | DeleteMemory | OpenThread | ThreadNews
_KINDS: dict[str, type[Effect]] = {
    kind.__name__: kind for kind in (AddMemory, ChangeMemory, DeleteMemory, OpenThread, ThreadNews)
}


class MemoryWriter:
    """Applies a job's planned effects in order, each exactly once across re-runs."""

    def __init__(self, knowledge: KnowledgeBase, changes: ChangeLog, threads: OngoingThreads | None = None) -> None:
        """`threads`: where thread effects are written (None: they are planned by no one)."""
        self._knowledge = knowledge
        self._changes = changes
        self._threads = threads

    def apply(self, scope: Scope, effects: Sequence[Effect], checkpoint: Checkpoint, *, stage: Stage) -> None:
        """Apply the effects of `stage` that no earlier run of the job finished (sync: run in a worker thread)."""
        index = checkpoint.applied(stage)
        while index < len(effects):
            deletes = _deletes_from(effects, index)
            if deletes:  # a run of deletes is one call to the store: each call costs as much as a batch
                self._changes.record_changes([(scope, effect.logged) for effect in deletes if effect.logged])
                self._knowledge.delete(scope, [effect.memory_id for effect in deletes])
            else:
                self._apply(scope, effects[index])
            index += max(len(deletes), 1)
            checkpoint.reached(f"{stage}: effect {index} of {len(effects)} written")
            checkpoint.count_applied(stage, index)

    def apply_at_once(self, scope: Scope, effects: Sequence[Effect], now: datetime) -> None:
        """Apply memory effects together, one store call per kind (sync): the change log's rows first, then the
        new memories (each with the changes planned for it), the changes and, last, the deletes. Applied again (a
        job re-run after a crash), they write nothing twice, as `apply`'s do. `now`: when the new ones are learned.
        """
        added: dict[str, MemoryRecord] = {}
        changed: list[tuple[str, MemoryChange]] = []
        deleted: list[str] = []
        logged: list[tuple[Scope, LoggedChange]] = []
        for effect in effects:
            match effect:
                case AddMemory():
                    added[effect.memory_id] = _new_memory(scope, effect, now)
                case ChangeMemory() if effect.memory_id in added:
                    added[effect.memory_id] = effect.change.applied_to(added[effect.memory_id])
                case ChangeMemory():
                    changed.append((effect.memory_id, effect.change))
                case DeleteMemory():
                    deleted.append(effect.memory_id)
                case _:
                    raise TypeError(f"{type(effect).__name__} is not applied with memory effects")
            if isinstance(effect, ChangeMemory | DeleteMemory) and effect.logged is not None:
                logged.append((scope, effect.logged))
        self._changes.record_changes(logged)
        self._knowledge.write_many(scope, added=list(added.values()), changed=changed, deleted=deleted)

    def _apply(self, scope: Scope, effect: Effect) -> None:
        match effect:
            case AddMemory():
                self._knowledge.add(
                    scope,
                    effect.content,
                    category=effect.category,
                    source=effect.source,
                    importance=effect.importance,
                    verified=effect.verified,
                    conversation_id=effect.conversation_id,
                    message_ids=effect.message_ids,
                    learned_in=effect.learned_in,
                    about=effect.about,
                    until=effect.until,
                    memory_id=effect.memory_id,
                )
            case ChangeMemory():
                self._log(scope, effect.logged)  # first: a change that then fails keeps the old content
                self._knowledge.update(scope, effect.memory_id, effect.change)
            case OpenThread() if self._threads is not None:
                self._threads.open(
                    scope,
                    effect.thread_id,
                    effect.title,
                    effect.news,
                    since=effect.since,
                    at=effect.at,
                    message_ids=effect.message_ids,
                    place=effect.place,
                )
            case ThreadNews() if self._threads is not None:
                self._threads.add_news(
                    scope,
                    effect.thread_id,
                    effect.news,
                    at=effect.at,
                    message_ids=effect.message_ids,
                    place=effect.place,
                    close=effect.close,
                )

    def _log(self, scope: Scope, change: LoggedChange | None) -> None:
        if change is not None:
            self._changes.record_changes([(scope, change)])


def _new_memory(scope: Scope, effect: AddMemory, now: datetime) -> MemoryRecord:
    """The memory an `AddMemory` writes, learned at `now`."""
    if not effect.content.strip():
        raise ValueError("a memory needs some content")
    return MemoryRecord(
        id=effect.memory_id,
        scope=scope,
        content=effect.content.strip(),
        category=effect.category,
        importance=effect.importance,
        created_at=now,
        last_access=now,
        source=effect.source,
        verified=effect.verified,
        conversation_id=effect.conversation_id,
        message_ids=effect.message_ids,
        learned_in=effect.learned_in,
        about=effect.about,
        until=effect.until,
    )


def _deletes_from(effects: Sequence[Effect], start: int) -> list[DeleteMemory]:
    """The deletes that follow one another from `start` (none if `effects[start]` is not one)."""
    deletes: list[DeleteMemory] = []
    for effect in effects[start:]:
        if not isinstance(effect, DeleteMemory):
            break
        deletes.append(effect)
    return deletes


# -- saving plans in a checkpoint (JSON) ---------------------------------------------------------


def effects_to_json(effects: Sequence[Effect]) -> list[dict[str, Any]]:
    """Effects as JSON-ready dicts, for a checkpoint; a change as the values it sets."""
    return [{"effect": type(effect).__name__, **_plain(_fields(effect))} for effect in effects]


def _fields(effect: Effect) -> dict[str, Any]:
    fields = _shallow(effect)  # not `dataclasses.asdict`, which deep-copies every value: a night plans thousands
    if isinstance(effect, ChangeMemory | DeleteMemory) and effect.logged is not None:
        fields["logged"] = _shallow(effect.logged)
    if isinstance(effect, ChangeMemory):
        del fields["change"]
        fields["values"] = effect.change.values()
    return fields


def _shallow(item: Any) -> dict[str, Any]:
    return {field.name: getattr(item, field.name) for field in dataclasses.fields(item)}


def effects_from_json(saved: Sequence[dict[str, Any]]) -> list[Effect]:
    """The effects `effects_to_json` saved."""
    effects: list[Effect] = []
    for item in saved:
        fields = {name: _revived(name, value) for name, value in item.items() if name != "effect"}
        if "values" in fields:
            fields["change"] = MemoryChange.of(fields.pop("values"))
        effects.append(_KINDS[item["effect"]](**fields))
    return effects


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dict):
        return {name: _plain(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _revived(name: str, value: Any) -> Any:
    if name == "logged" and value is not None:
        return LoggedChange(**{key: _moment(item) for key, item in value.items()})
    if name == "values":  # plans saved before changes were typed cleared a date or a review with ""
        return {key: None if item == "" else _moment(item) for key, item in value.items()}
    if name == "message_ids":
        return tuple(value)
    return _moment(value)  # `about`, `until`, `since`, `at`


def _moment(value: Any) -> Any:
    return datetime.fromisoformat(value["datetime"]) if isinstance(value, dict) and "datetime" in value else value
