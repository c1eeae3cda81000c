"""The persona's own `system` memories as records: facts about the character, shared by all of its users."""

from __future__ import annotations

from datetime import UTC, datetime

from knowledge.records import MemoryRecord, Scope
from personas.loader import Persona

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def system_records(persona: Persona) -> list[MemoryRecord]:
    """The persona's `system_memories` as read-only records (ids `sys_<n>`), in the order of its file."""
    scope = Scope(persona.id, "persona")
    return [
        MemoryRecord(
            id=f"sys_{index}",
            scope=scope,
            content=content,
            category="system",
            importance=3.0,
            created_at=_EPOCH,
            last_access=_EPOCH,
            source="system",
            verified=True,
        )
        for index, content in enumerate(persona.system_memories, start=1)
    ]
