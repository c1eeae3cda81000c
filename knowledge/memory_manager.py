"""MemoryManager: the decay pass of DESIGN §3.1 over every memory of every scope.

This is the one maintenance operation that spans scopes. It applies the pure rules of `decay.py`,
writes back only what changed, and hands callers counts and review requests, never records.
Chat turns go on during the pass, so each page is written right after it is read; a boost landing in
that gap is overwritten by the stale importance until the next pass recomputes it from the boosted
base (and a memory at the deletion line is still deleted).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache

from .decay import DecayOutcome, MemoryPolicy, decay_outcome
from .journal import Journal
from .records import MemoryRecord, Scope
from .store import MAINTENANCE_PAGE, ChromaKnowledgeBase

# Core and system memories never change in a decay pass, so the pass does not even read them.
DECAYING_CATEGORIES = ("fact", "episode")


@dataclass(frozen=True, slots=True)
class DecayReport:
    """What one decay pass did."""

    scanned: int
    decayed: int  # importance written (deleted memories not counted)
    deleted: int
    reviews: list[tuple[Scope, str]]  # decay reviews requested: (scope, memory id)
    seconds: float


@dataclass(slots=True)
class _PageChanges:
    """The writes one page of records needs, applied together."""

    importances: dict[str, float] = field(default_factory=dict)
    reviews: list[tuple[Scope, str]] = field(default_factory=list)
    rearmed: list[str] = field(default_factory=list)
    deletions: list[tuple[MemoryRecord, str]] = field(default_factory=list)  # with the reason for the history


class MemoryManager:
    """Runs the decay pass; each persona may have its own rules."""

    def __init__(
        self,
        store: ChromaKnowledgeBase,
        journal: Journal,
        now: Callable[[], datetime],
        policy_for: Callable[[str], MemoryPolicy] = lambda persona_id: MemoryPolicy(),
        *,
        page_size: int = MAINTENANCE_PAGE,
    ) -> None:
        self._store = store
        self._journal = journal
        self._now = now
        self._policy_for = policy_for
        self._page_size = page_size

    def apply_decay(self) -> DecayReport:
        """Decay, delete and flag for review every memory as of now; a second pass at the same moment does nothing."""
        started = time.perf_counter()
        now = self._now()
        policy_for = cache(self._policy_for)  # one lookup per persona per pass
        scanned = decayed = deleted = 0
        reviews: list[tuple[Scope, str]] = []
        for page in self._store.iter_all_record_pages(categories=DECAYING_CATEGORIES, page_size=self._page_size):
            changes = _PageChanges()
            for record in page:
                policy = policy_for(record.scope.persona_id)
                _plan(record, decay_outcome(record, now, policy), policy, changes)
            self._write(changes, now)
            scanned += len(page)
            decayed += len(changes.importances)
            deleted += len(changes.deletions)
            reviews += changes.reviews
        return DecayReport(scanned, decayed, deleted, reviews, time.perf_counter() - started)

    def _write(self, changes: _PageChanges, now: datetime) -> None:
        # History first: if the delete then fails, the next pass deletes again rather than losing the old content.
        for record, reason in changes.deletions:
            self._journal.record_change(
                record.scope,
                record.id,
                action="delete",
                actor="decay",
                old_content=record.content,
                new_content=None,
                at=now,
                detail=reason,
            )
        self._store.delete_many(record.id for record, _ in changes.deletions)
        self._store.update_decay_state_many(
            changes.importances,
            review_pending=[memory_id for _, memory_id in changes.reviews],
            promote_rearmed=changes.rearmed,
        )


def _plan(record: MemoryRecord, outcome: DecayOutcome, policy: MemoryPolicy, changes: _PageChanges) -> None:
    """Add what `outcome` means for `record` to this page's writes."""
    if outcome.delete:
        changes.deletions.append((record, _deletion_reason(record, policy, outcome.importance)))
        return
    # chromadb keeps about 16 significant digits, so an exact comparison would rewrite some values every pass.
    if not math.isclose(outcome.importance, record.importance, rel_tol=1e-12):
        changes.importances[record.id] = outcome.importance
    if outcome.review == "decay":
        changes.reviews.append((record.scope, record.id))
    if record.category == "fact" and record.promote_reviewed and outcome.importance < policy.promote_review_at:
        changes.rearmed.append(record.id)


def _deletion_reason(record: MemoryRecord, policy: MemoryPolicy, importance: float) -> str:
    if record.category == "episode":
        return f"episode older than {policy.episode_max_age_days} days"
    return f"importance {importance:.3f}"

