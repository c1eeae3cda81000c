"""MemoryEditor: deliberate changes to one scope's memories — edits, imports and forgetting.

Users forget through `/forget`; operators edit, import and forget through `companion memory`. Every
change is written to the history first (who, when, old -> new), except that forgetting keeps no
content: not keeping it is the point.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.clock import Clock
from knowledge.journal.change_log import ChangeLog, MemoryChange
from knowledge.memory.memory_file import ImportPlan, MemoryEdit
from knowledge.memory.store import KnowledgeBase
from knowledge.records import MemoryRecord, Scope


class MemoryEditor:
    """Applies edits, imports and deletions to the memories of one scope at a time."""

    def __init__(self, knowledge: KnowledgeBase, changes: ChangeLog, clock: Clock) -> None:
        self._knowledge = knowledge
        self._changes = changes
        self._clock = clock

    def edit(self, edit: MemoryEdit, *, actor: str = "operator", detail: str = "") -> MemoryRecord | None:
        """Apply one edit to a memory of the edit's scope; None if the scope has no such memory.

        The scope is checked before anything is written: an edit built from another scope's record
        leaves no trace of that record's text in this scope's change log. A new importance counts
        from now, as a boost does: the memory is treated as just used.
        """
        scope, now = edit.record.scope, self._clock.now()
        stored = self._knowledge.get(scope, [edit.record.id])
        if not stored:
            return None
        self._changes.record_change(
            scope,
            edit.record.id,
            action="edit",
            actor=actor,
            old_content=stored[0].content,
            new_content=edit.content if edit.content is not None else stored[0].content,
            at=now,
            detail=detail or _describe(edit),
        )
        return self._knowledge.update(
            scope,
            edit.record.id,
            content=edit.content,
            category=edit.category,
            importance=edit.importance,
            last_access=now if edit.importance is not None else None,
            shared=edit.shared,
            about=edit.about,
            until=edit.until,
        )

    def forget(self, scope: Scope, ids: Iterable[str], *, actor: str) -> int:
        """Delete these memories of `scope` (ids of other scopes do nothing); returns how many went."""
        records = self._knowledge.get(scope, ids)
        now = self._clock.now()
        self._changes.record_changes(
            (scope, MemoryChange(record.id, "delete", actor, None, None, f"forgotten at the {actor}'s request", now))
            for record in records
        )
        return self._knowledge.delete(scope, [record.id for record in records])

    def apply_import(self, scope: Scope, plan: ImportPlan, *, source: str) -> None:
        """Carry out an import plan made for `scope`; `source` (the file name) goes into the history."""
        for edit in plan.updates:
            self.edit(edit, detail=f"imported from {source}: {_describe(edit)}")
        now = self._clock.now()
        self._changes.record_changes(
            (scope, MemoryChange(record.id, "add", "operator", None, record.content, f"imported from {source}", now))
            for record in plan.additions
        )
        self._knowledge.add_records(plan.additions)
        self.forget(scope, [record.id for record in plan.deletions], actor="operator")


def _describe(edit: MemoryEdit) -> str:
    changes = []
    if edit.content is not None:
        changes.append("text")
    if edit.category is not None:
        changes.append(f"category {edit.record.category} -> {edit.category}")
    if edit.importance is not None:
        changes.append(f"importance {edit.record.importance:.2f} -> {edit.importance:.2f}")
    if edit.shared is not None:
        changes.append("shared in groups" if edit.shared else "no longer shared in groups")
    for name in ("about", "until"):
        moment = getattr(edit, name)
        if moment is not None:
            changes.append(f"{name} {moment:%Y-%m-%d %H:%M} UTC" if moment else f"no {name} date")
    return ", ".join(changes)
