"""DecayPass: the decay pass of DESIGN §3.1 over every scope (the rules it applies are in `decay.py`).

This is the one maintenance operation that spans scopes. Importance fades on its own (the store
derives it on every read), so the pass has only the discrete events to carry out: deleting a memory
and asking for its review. Every write gives a memory the moment the next such event is due, so the
pass reads only the memories whose moment has come, applies the pure rules of `decay.py` to them and
hands callers counts and review requests, never records.

Chat turns go on during the pass: a boost landing between the read and the write of a page does not
save a memory from a deletion or a review request decided on the state before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cache

from .change_log import ChangeLog, MemoryChange
from .decay import DecayOutcome, MemoryPolicy, decay_outcome
from .records import MemoryRecord, Scope
from .store import MAINTENANCE_PAGE, ChromaKnowledgeBase


@dataclass(frozen=True, slots=True)
class DecayReport:
    """What one decay pass did."""

    scanned: int  # memories that were due, all of which the pass read
    deleted: int
    reviews: list[tuple[Scope, str]]  # decay reviews requested: (scope, memory id)
    rescheduled: int  # due by rules since changed, with nothing to do yet: given their new due time
    seconds: float
    deferred: int = 0  # reviews beyond this pass's cap: still due, requested by a later pass


@dataclass(slots=True)
class _PageChanges:
    """The writes one page of due records needs, applied together."""

    deletions: list[tuple[Scope, MemoryChange]] = field(default_factory=list)  # the history row of each
    reviews: list[MemoryRecord] = field(default_factory=list)  # already marked `review_pending="decay"`
    rescheduled: list[MemoryRecord] = field(default_factory=list)


class DecayPass:
    """Runs the decay pass, under the rules the store applies to each persona."""

    def __init__(
        self,
        store: ChromaKnowledgeBase,
        changes: ChangeLog,
        now: Callable[[], datetime],
        *,
        page_size: int = MAINTENANCE_PAGE,
        max_reviews: int = 500,
    ) -> None:
        """`max_reviews`: review requests per pass, so a backlog (an import, long downtime) becomes LLM
        work spread over several days instead of thousands of review calls at once."""
        self._store = store
        self._changes = changes
        self._now = now
        self._page_size = page_size
        self._max_reviews = max_reviews

    def apply_decay(self) -> DecayReport:
        """Delete and flag for review every memory due as of now; a second pass at the same moment finds none."""
        started = time.perf_counter()
        now = self._now()
        policy_for = cache(self._store.policy_for)  # one lookup per persona per pass
        scanned = deleted = rescheduled = deferred = 0
        reviews: list[tuple[Scope, str]] = []
        for page in self._store.iter_due_record_pages(now, page_size=self._page_size):
            changes = _PageChanges()
            for record in page:
                policy = policy_for(record.scope.persona_id)
                _plan(record, decay_outcome(record, now, policy), policy, now, changes)
            allowed = max(self._max_reviews - len(reviews), 0)
            deferred += len(changes.reviews[allowed:])
            del changes.reviews[allowed:]  # not written: they stay due
            self._write(changes)
            scanned += len(page)
            deleted += len(changes.deletions)
            reviews += [(record.scope, record.id) for record in changes.reviews]
            rescheduled += len(changes.rescheduled)
        return DecayReport(scanned, deleted, reviews, rescheduled, time.perf_counter() - started, deferred)

    def _write(self, changes: _PageChanges) -> None:
        # History first: if the delete then fails, the next pass deletes again rather than losing the old content.
        self._changes.record_changes(changes.deletions)
        self._store.delete_many(entry.memory_id for _, entry in changes.deletions)
        self._store.write_decay_state_many(changes.reviews + changes.rescheduled)


def _plan(
    record: MemoryRecord, outcome: DecayOutcome, policy: MemoryPolicy, now: datetime, changes: _PageChanges
) -> None:
    """Add what `outcome` means for the due `record` to this page's writes."""
    if outcome.delete:
        reason = _deletion_reason(record, policy, outcome.importance)
        entry = MemoryChange(record.id, "delete", "decay", record.content, None, reason, now)
        changes.deletions.append((record.scope, entry))
    elif outcome.review is not None:
        changes.reviews.append(replace(record, review_pending=outcome.review))
    else:
        # Due by the rules it was written under, not by the persona's current ones.
        changes.rescheduled.append(record)


def _deletion_reason(record: MemoryRecord, policy: MemoryPolicy, importance: float) -> str:
    if record.category == "episode":
        return f"episode older than {policy.episode_max_age_days} days"
    return f"importance {importance:.3f}"
