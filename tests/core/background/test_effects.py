"""A job's planned writes survive the trip through its checkpoint's JSON, plans saved by older versions too."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from core.background.effects import AddMemory, ChangeMemory, DeleteMemory, effects_from_json, effects_to_json
from knowledge.journal.change_log import LoggedChange
from knowledge.records import CLEAR, MemoryChange

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
