"""A job's planned writes survive the trip through its checkpoint's JSON, plans saved by older versions too, and
written all at once they leave what written one by one leaves."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from core.background.checkpoint import Checkpoint, Stage
from core.background.effects import (
    AddMemory,
    ChangeMemory,
    DeleteMemory,
    Effect,
    MemoryWriter,
    effects_from_json,
    effects_to_json,
)
from knowledge.journal.change_log import ChangeLog, LoggedChange
from knowledge.memory.chroma_store import ChromaKnowledgeBase, open_chroma_client
from knowledge.records import CLEAR, MemoryChange, MemoryRecord, Scope
from knowledge.search.embedding import Embedder
from knowledge.sql.sqlite import SQLiteDatabase
from tests.fakes.clock import FakeClock

NOW = datetime(2026, 3, 1, 4, 0, tzinfo=UTC)


def test_effects_come_back_from_their_json_as_they_were_planned() -> None:
    logged = LoggedChange("mem_1", "update", "background_ai", "Alice has an interview", "…on Monday", "", NOW)
    planned = [
        AddMemory("mem_2", "Alice has a cat", category="fact", source="user", importance=1.5, message_ids=("m1",)),
        ChangeMemory("mem_1", MemoryChange(content="…on Monday", last_access=NOW, about=CLEAR), logged),
        DeleteMemory("mem_3", logged),
    ]
    saved = json.loads(json.dumps(effects_to_json(planned)))
    assert effects_from_json(saved) == planned


def test_a_change_planned_before_changes_were_typed_still_applies_as_planned() -> None:
    saved = [
        {
            "effect": "ChangeMemory",
            "memory_id": "mem_1",
            "values": {"last_access": {"datetime": NOW.isoformat()}, "review_pending": "", "about": ""},
            "logged": None,
        }
    ]
    [change] = effects_from_json(saved)
    assert change == ChangeMemory("mem_1", MemoryChange(last_access=NOW, review_pending=CLEAR, about=CLEAR))


def test_effects_applied_at_once_leave_what_one_by_one_leaves_and_applied_again_nothing_twice(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope
) -> None:
    def written(where: str, apply: str) -> tuple[list[MemoryRecord], list[LoggedChange]]:
        store = ChromaKnowledgeBase(open_chroma_client(path=tmp_path / where), embedder, now=clock.now)
        changes = ChangeLog(SQLiteDatabase(tmp_path / f"{where}.sqlite3"))
        for memory_id, text in [("mem_1", "my locker code is 17"), ("mem_2", "Alice's locker code is 17")]:
            store.add(alice, text, category="fact", source="user", memory_id=memory_id)
        writer = MemoryWriter(store, changes)
        merged = LoggedChange("mem_3", "merge", "consolidation", None, "Alice's locker code is 17", "", NOW)
        effects: list[Effect] = [
            AddMemory("mem_3", "Alice's locker code is 17", category="fact", source="background_ai", importance=1.5),
            ChangeMemory("mem_3", MemoryChange(hits=4, last_access=NOW), merged),
            *(
                DeleteMemory(source, replace(merged, memory_id=source, detail="into mem_3"))
                for source in ("mem_1", "mem_2")
            ),
        ]
        for _ in range(2):  # the second time as a job re-run after a crash
            if apply == "at once":
                writer.apply_at_once(alice, effects, clock.now())
            else:
                writer.apply(alice, effects, Checkpoint(), stage=Stage.CONSOLIDATION)
        return store.memories(alice), changes.changes(alice)

    one_by_one, at_once = written("one", "one by one"), written("all", "at once")
    assert at_once == one_by_one
    [record] = at_once[0]
    assert (record.id, record.hits, record.importance, record.last_access) == ("mem_3", 4, 1.5, NOW)
    assert [change.memory_id for change in at_once[1]] == ["mem_3", "mem_1", "mem_2"]
