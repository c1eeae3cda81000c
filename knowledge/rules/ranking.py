"""Ranking memories for a prompt: the search engine's relevance, importance and recency together.

The hybrid engine (`knowledge/search/index.py`) orders hits by relevance alone; a prompt also prefers what
matters more and what was used lately (docs/development/design-rules.md#ranking). Each signal is scaled to
0..1 and weighted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from knowledge.records import ScoredMemory


@dataclass(frozen=True, slots=True)
class RankingWeights:
    """How much each signal counts; the three weights add up to 1."""

    relevance: float = 0.6
    importance: float = 0.25
    recency: float = 0.15
    recency_half_life_days: float = 14.0
    importance_ceiling: float = 3.0  # importance at which a memory counts fully (the core threshold)


def rank_score(hit: ScoredMemory, now: datetime, weights: RankingWeights = RankingWeights()) -> float:
    """One number in 0..1 for ordering hits in a prompt: higher comes first."""
    record = hit.record
    importance = min(max(record.importance, 0.0) / weights.importance_ceiling, 1.0)
    age_days = max((now - record.last_access).total_seconds(), 0.0) / 86400
    recency = math.exp(-math.log(2) * age_days / weights.recency_half_life_days)
    relevance = min(max(hit.relevance, 0.0), 1.0)
    return weights.relevance * relevance + weights.importance * importance + weights.recency * recency


def rank_for_prompt(
    hits: list[ScoredMemory], now: datetime, weights: RankingWeights = RankingWeights()
) -> list[ScoredMemory]:
    """Hits ordered by `rank_score`, best first."""
    return sorted(hits, key=lambda hit: rank_score(hit, now, weights), reverse=True)
