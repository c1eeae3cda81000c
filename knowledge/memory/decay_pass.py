"""DecayPass: the decay pass over every scope (the rules it applies are in `decay.py`).

The rules: docs/development/design-rules.md#decay.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cache

from knowledge.journal.change_log import ChangeLog, LoggedChange
from knowledge.memory.chroma_store import MAINTENANCE_PAGE, ChromaKnowledgeBase
from knowledge.records import MemoryRecord, ReviewKind, Scope
from knowledge.rules.decay import DecayOutcome, MemoryPolicy, decay_outcome, review_retry_at


@dataclass(frozen=True, slots=True)
class DecayReport:
    """What one decay pass did."""

    scanned: int  # memories that were due, all of which the pass read
    deleted: int
    # reviews requested: (scope, memory id, kind): decay reviews, and requests retried after their retry time
    reviews: list[tuple[Scope, str, ReviewKind]]
    rescheduled: int  # due by rules since changed, with nothing to do yet: given their new due time
    seconds: float
    capped: bool = False  # the pass asked for `max_reviews` reviews: more may wait, unread, for later passes


@dataclass(slots=True)
class _PageChanges:
    """The writes one page of due records needs, applied together."""

    deletions: list[tuple[Scope, LoggedChange]] = field(default_factory=list)  # the history row of each
    reviews: list[tuple[MemoryRecord, ReviewKind]] = field(default_factory=list)  # the record as read, the review
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
        work spread over several days instead of thousands of review calls at once. A pass reads only
        the memories it may ask reviews for; the rest of the backlog waits, unread, for later passes."""
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
        scanned = deleted = rescheduled = 0
        reviews: list[tuple[Scope, str, ReviewKind]] = []
        for page in self._due_pages(now, reviews):
            changes = _PageChanges()
            for record in page:
                policy = policy_for(record.scope.persona_id)
                _plan(record, decay_outcome(record, now, policy), policy, now, changes)
            allowed = max(self._max_reviews - len(reviews), 0)
            # Beyond the cap (only in stores written before reviews were due apart): written back as they are,
            # which files them as review-due, for a later pass to read.
            changes.rescheduled += [record for record, _ in changes.reviews[allowed:]]
            del changes.reviews[allowed:]
            self._write(changes, now, policy_for)
            scanned += len(page)
            deleted += len(changes.deletions)
            reviews += [(record.scope, record.id, kind) for record, kind in changes.reviews]
            rescheduled += len(changes.rescheduled)
        capped = len(reviews) >= self._max_reviews
        return DecayReport(scanned, deleted, reviews, rescheduled, time.perf_counter() - started, capped)

    def _due_pages(self, now: datetime, requested: list[tuple[Scope, str, ReviewKind]]) -> Iterator[list[MemoryRecord]]:
        """Every due memory but those due for a review, then as many of those as the cap leaves room for."""
        yield from self._store.iter_due_record_pages(now, page_size=self._page_size)
        if reviewable := self._store.fetch_review_due_records(now, limit=self._max_reviews - len(requested)):
            yield reviewable

    def _write(self, changes: _PageChanges, now: datetime, policy_for: Callable[[str], MemoryPolicy]) -> None:
        # History first: if the delete then fails, the next pass deletes again rather than losing the old content.
        self._changes.record_changes(changes.deletions)
        self._store.delete_many((scope, entry.memory_id) for scope, entry in changes.deletions)
        requested = [
            replace(
                record, review_pending=kind, review_retry_at=review_retry_at(now, policy_for(record.scope.persona_id))
            )
            for record, kind in changes.reviews
        ]
        self._store.write_decay_state_many(requested + changes.rescheduled)


def _plan(
    record: MemoryRecord, outcome: DecayOutcome, policy: MemoryPolicy, now: datetime, changes: _PageChanges
) -> None:
    """Add what `outcome` means for the due `record` to this page's writes."""
    if outcome.delete:
        reason = _deletion_reason(record, policy, outcome.importance)
        entry = LoggedChange(record.id, "delete", "decay", record.content, None, reason, now)
        changes.deletions.append((record.scope, entry))
    elif outcome.review is not None:
        changes.reviews.append((record, outcome.review))
    else:
        # Due by the rules it was written under, not by the persona's current ones.
        changes.rescheduled.append(record)


def _deletion_reason(record: MemoryRecord, policy: MemoryPolicy, importance: float) -> str:
    if record.category == "episode":
        return f"episode older than {policy.episode_max_age_days} days"
    return f"importance {importance:.3f}"
