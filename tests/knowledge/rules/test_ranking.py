"""Prompt ranking: relevance 0.6, importance 0.25 and recency 0.15, each scaled to 0..1.

The rule: docs/development/design-rules.md#ranking.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from knowledge.records import MemoryRecord, Scope, ScoredMemory
from knowledge.rules.ranking import RankingWeights, rank_for_prompt, rank_score

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def hit(relevance: float, importance: float, idle_days: float, memory_id: str = "mem_1") -> ScoredMemory:
    record = MemoryRecord(
        id=memory_id,
        scope=Scope("xiaoxiang", "cli:alice"),
        content="主人喜欢拉面",
        category="fact",
        importance=importance,
        created_at=NOW - timedelta(days=idle_days),
        last_access=NOW - timedelta(days=idle_days),
        source="user",
    )
    return ScoredMemory(record, similarity=relevance, relevance=relevance)


def test_the_weights_add_up_to_one() -> None:
    weights = RankingWeights()
    assert weights.relevance + weights.importance + weights.recency == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("relevance", "importance", "idle_days", "score"),
    [
        (1.0, 0.0, 0, 0.6 + 0.15),  # relevance counts 0.6, a memory used just now 0.15
        (0.0, 3.0, 0, 0.25 + 0.15),  # importance counts 0.25 at the core line, 3.0
        (0.0, 1.5, 0, 0.125 + 0.15),  # ... and in proportion below it
        (0.0, 0.0, 14, 0.075),  # recency halves every 14 days
        (0.0, 0.0, 28, 0.0375),
        (1.5, 9.0, 0, 1.0),  # every signal is capped at 1
        (-0.2, -1.0, 0, 0.15),  # and floored at 0
    ],
)
def test_each_signal_counts_with_its_weight(
    relevance: float, importance: float, idle_days: float, score: float
) -> None:
    assert rank_score(hit(relevance, importance, idle_days), NOW) == pytest.approx(score)


def test_a_relevant_old_fact_outranks_an_important_fresh_one_that_is_beside_the_point() -> None:
    relevant = hit(1.0, 0.3, idle_days=60, memory_id="mem_relevant")
    important = hit(0.3, 3.0, idle_days=0, memory_id="mem_important")
    assert [each.record.id for each in rank_for_prompt([important, relevant], NOW)] == ["mem_relevant", "mem_important"]


def test_between_equally_relevant_memories_importance_then_recency_decide() -> None:
    faded = hit(0.5, 0.5, idle_days=30, memory_id="mem_faded")
    important = hit(0.5, 2.5, idle_days=30, memory_id="mem_important")
    fresh = hit(0.5, 0.5, idle_days=0, memory_id="mem_fresh")
    ranked = rank_for_prompt([faded, fresh, important], NOW)
    assert [each.record.id for each in ranked] == ["mem_important", "mem_fresh", "mem_faded"]
