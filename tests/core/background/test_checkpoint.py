"""Checkpoint: each stage's decision and its count of applied writes, saved under the names jobs always used."""

from __future__ import annotations

import json
from typing import Any

from core.background.checkpoint import Checkpoint, Stage


def test_progress_is_saved_under_the_stage_names_jobs_always_used() -> None:
    saved: list[str] = []
    checkpoint = Checkpoint(save=lambda values: saved.append(json.dumps(values)))
    checkpoint.put(Stage.MODEL, {"effects": []})
    checkpoint.count_applied(Stage.MODEL, 2)
    checkpoint.put(Stage.CHECKIN_TEXT, "How did the interview go?")
    assert json.loads(saved[-1]) == {
        "model": {"effects": []},
        "model:applied": 2,
        "text": "How did the interview go?",
    }


def test_progress_saved_by_an_earlier_run_is_read_back_by_stage() -> None:
    earlier: dict[str, Any] = {"explicit": {"effects": []}, "explicit:applied": 1, "verdict": {"decision": {}}}
    checkpoint = Checkpoint(json.loads(json.dumps(earlier)))
    assert checkpoint.get(Stage.EXPLICIT) == {"effects": []} and checkpoint.applied(Stage.EXPLICIT) == 1
    assert checkpoint.get(Stage.VERDICT) == {"decision": {}} and checkpoint.applied(Stage.VERDICT) == 0
    assert checkpoint.get(Stage.MODEL) is None
