"""MemoryEditor: deliberate changes to one scope's memories — edits, imports and forgetting.

Users forget through `/forget`; operators edit, import and forget through `companion memory`. Every
change is written to the history first (who, when, old -> new), except that forgetting keeps no
content: not keeping it is the point.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from core.clock import Clock
from knowledge.journal.change_log import ChangeLog, LoggedChange
from knowledge.memory.memory_file import ImportPlan
from knowledge.memory.store import KnowledgeBase
from knowledge.records import CLEAR, KEEP, MemoryChange, MemoryRecord, Scope


class MemoryEditor:
    """Applies edits, imports and deletions to the memories of one scope at a time."""

    def __init__(self, knowledge: KnowledgeBase, changes: ChangeLog, clock: Clock) -> None:
        self._knowledge = knowledge
        self._changes = changes
        self._clock = clock

    def edit(
        self, record: MemoryRecord, change: MemoryChange, *, actor: str = "operator", detail: str = ""
    ) -> MemoryRecord | None:
        """Make `change` to a memory of `record`'s scope; None if the scope has no such memory.

        The scope is checked before anything is written: a record of another scope posing as this one's
        leaves no trace of that record's text in this scope's change log. A new importance counts
        from now, as a boost does: the memory is treated as just used.
        """
        scope, now = record.scope, self._clock.now()
        stored = self._knowledge.get(scope, [record.id])
        if not stored:
            return None
        self._changes.record_change(
            scope,
            record.id,
            action="edit",
            actor=actor,
            old_content=stored[0].content,
            new_content=stored[0].content if change.content is KEEP else change.content,
            at=now,
            detail=detail or _describe(record, change),
        )
        if change.importance is not KEEP:
            change = replace(change, last_access=now)
        return self._knowledge.update(scope, record.id, change)

    def forget(self, scope: Scope, ids: Iterable[str], *, actor: str) -> int:
        """Delete these memories of `scope` (ids of other scopes do nothing); returns how many went."""
        records = self._knowledge.get(scope, ids)
        now = self._clock.now()
        self._changes.record_changes(
            (scope, LoggedChange(record.id, "delete", actor, None, None, f"forgotten at the {actor}'s request", now))
            for record in records
        )
        return self._knowledge.delete(scope, [record.id for record in records])

    def apply_import(self, scope: Scope, plan: ImportPlan, *, source: str) -> None:
        """Carry out an import plan made for `scope`; `source` (the file name) goes into the history."""
        for record, change in plan.updates:
            self.edit(record, change, detail=f"imported from {source}: {_describe(record, change)}")
        now = self._clock.now()
        self._changes.record_changes(
            (scope, LoggedChange(record.id, "add", "operator", None, record.content, f"imported from {source}", now))
            for record in plan.additions
        )
        self._knowledge.add_records(plan.additions)
        self.forget(scope, [record.id for record in plan.deletions], actor="operator")


def _describe(record: MemoryRecord, change: MemoryChange) -> str:
    changes = []
    if change.content is not KEEP:
        changes.append("text")
    if change.category is not KEEP:
        changes.append(f"category {record.category} -> {change.category}")
    if change.importance is not KEEP:
        changes.append(f"importance {record.importance:.2f} -> {change.importance:.2f}")
    if change.shared is not KEEP:
        changes.append("shared in groups" if change.shared else "no longer shared in groups")
    for name, moment in (("about", change.about), ("until", change.until)):
        if moment is CLEAR:
            changes.append(f"no {name} date")
        elif moment is not KEEP:
            changes.append(f"{name} {moment:%Y-%m-%d %H:%M} UTC")
    return ", ".join(changes)
