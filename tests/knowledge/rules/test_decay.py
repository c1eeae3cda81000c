"""The pure decay rules (docs/development/design-rules.md#decay): exact values, thresholds, and what never decays."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from knowledge.records import CLEAR, KEEP, Category, MemoryChange, MemoryRecord, Scope
from knowledge.rules.decay import (
    DecayOutcome,
    MemoryPolicy,
    after_boost,
    after_review,
    boosted,
    current_importance,
    decay_days,
    decay_outcome,
    decays,
    due_for_review,
    needs_promote_review,
    next_due,
)

NOW = datetime(2026, 3, 1, 4, 0, tzinfo=UTC)
POLICY = MemoryPolicy()


def outcome(record: MemoryRecord, policy: MemoryPolicy = POLICY) -> tuple[float, bool, str | None]:
    """The decay outcome at NOW as (importance, delete, review)."""
    result = decay_outcome(record, NOW, policy)
    return result.importance, result.delete, result.review


def memory(
    category: Category = "fact",
    importance: float = 1.0,
    *,
    idle_days: float = 0,
    age_days: float | None = None,
    **flags: Any,
) -> MemoryRecord:
    """A record last used `idle_days` ago and created `age_days` ago (default: when last used)."""
    return MemoryRecord(
        id="mem_1",
        scope=Scope("xiaoxiang", "cli:alice"),
        content="主人喜欢拉面",
        category=category,
        importance=importance,
        created_at=NOW - timedelta(days=idle_days if age_days is None else age_days),
        last_access=NOW - timedelta(days=idle_days),
        source="user",
        **flags,
    )


@pytest.mark.parametrize(
    ("idle_days", "importance"),
    [(6.99, 1.0), (7, 1.0), (7.99, 1.0), (8, 0.95), (14, 0.95**7), (30, 0.95**23)],
)
def test_a_fact_loses_five_percent_a_day_after_a_week(idle_days: float, importance: float) -> None:
    assert decay_outcome(memory(idle_days=idle_days), NOW, POLICY).importance == pytest.approx(importance, abs=1e-12)


def test_decay_starts_from_the_base_not_from_the_last_written_importance() -> None:
    # A pass already wrote 0.95 for day 8; at day 9 the value is base * 0.95**2, not 0.95 * 0.95**2.
    record = memory(importance=0.95, idle_days=9, base_importance=1.0)
    assert decay_outcome(record, NOW, POLICY).importance == pytest.approx(0.95**2, abs=1e-12)


@pytest.mark.parametrize(("idle_days", "importance"), [(7, 1.0), (8, 0.8), (13, 0.8**6)])
def test_an_episode_loses_twenty_percent_a_day_after_a_week(idle_days: float, importance: float) -> None:
    assert outcome(memory("episode", idle_days=idle_days)) == (pytest.approx(importance, abs=1e-12), False, None)


def test_an_episode_is_deleted_at_fourteen_days_old_even_if_recently_used() -> None:
    assert not decay_outcome(memory("episode", idle_days=0, age_days=13.99), NOW, POLICY).delete
    assert decay_outcome(memory("episode", idle_days=0, age_days=14), NOW, POLICY).delete
    assert decay_outcome(memory("episode", 5.0, idle_days=14), NOW, POLICY).delete  # whatever its importance


def test_an_episode_decays_however_important_it_is() -> None:
    assert outcome(memory("episode", 3.5, idle_days=8)) == (pytest.approx(3.5 * 0.8), False, None)


@pytest.mark.parametrize(("category", "importance"), [("core", 1.0), ("system", 1.0), ("fact", 3.0), ("fact", 4.5)])
def test_core_system_and_very_important_memories_never_decay(category: Category, importance: float) -> None:
    record = memory(category, importance, idle_days=400)
    assert not decays(record, POLICY)
    assert outcome(record) == (importance, False, None)


def test_just_below_the_never_decay_line_a_fact_decays() -> None:
    assert decay_outcome(memory(importance=2.99, idle_days=8), NOW, POLICY).importance == pytest.approx(2.99 * 0.95)


def test_a_fact_crossing_below_half_asks_for_a_review_instead_of_being_deleted() -> None:
    # 0.95**13 = 0.513 (20 idle days), 0.95**14 = 0.488 (21), 0.95**24 = 0.292 (31).
    assert decay_outcome(memory(idle_days=20), NOW, POLICY).review is None
    assert outcome(memory(idle_days=21)) == (pytest.approx(0.95**14), False, "decay")
    assert outcome(memory(idle_days=31)) == (pytest.approx(0.95**24), False, "decay")


def test_a_pending_review_is_not_requested_again_and_protects_from_deletion() -> None:
    assert outcome(memory(idle_days=31, review_pending="decay")) == (pytest.approx(0.95**24), False, None)
    assert 0.95**24 < POLICY.fact_delete_below


def test_a_requested_review_that_never_ran_is_asked_again_at_its_retry_time_and_only_then() -> None:
    retry = NOW + timedelta(days=POLICY.review_retry_days)
    for kind in ("decay", "promote"):
        pending = memory(importance=0.2, idle_days=31, review_pending=kind, review_retry_at=retry)
        assert next_due(pending, POLICY) == retry
        assert decay_outcome(pending, retry - timedelta(microseconds=1), POLICY).review is None
        assert decay_outcome(pending, retry, POLICY) == DecayOutcome(pytest.approx(0.2 * 0.95**27), review=kind)


def test_the_pass_knows_which_due_memories_only_ask_for_a_review() -> None:
    assert due_for_review(memory(), POLICY)  # not yet reviewed on its way down
    assert due_for_review(memory(review_pending="promote", review_retry_at=NOW), POLICY)  # its retry
    assert not due_for_review(memory(importance=0.5, decay_kept=True), POLICY)  # deleted without a review
    assert not due_for_review(memory("episode"), POLICY)
    assert not due_for_review(memory(), MemoryPolicy(fact_delete_below=0.6))  # deleted before any review


def test_a_boost_that_asks_for_a_promote_review_sets_its_retry_time() -> None:
    change = after_boost(memory(importance=2.3), NOW, POLICY)
    assert change.review_retry_at == NOW + timedelta(days=POLICY.review_retry_days)
    assert after_boost(memory(importance=1.0), NOW, POLICY).review_retry_at is KEEP


def test_a_fact_kept_by_a_review_is_deleted_below_the_line_without_another_review() -> None:
    # Kept at 0.5: 0.5 * 0.95**9 = 0.315 (16 idle days), 0.5 * 0.95**10 = 0.299 (17).
    assert outcome(memory(importance=0.5, idle_days=16, decay_kept=True)) == (pytest.approx(0.5 * 0.95**9), False, None)
    assert outcome(memory(importance=0.5, idle_days=17, decay_kept=True)) == (pytest.approx(0.5 * 0.95**10), True, None)
    exactly_at_the_line = MemoryPolicy(fact_factor=0.5, grace_days=0)  # 0.6 * 0.5 == 0.3: kept
    assert outcome(memory(importance=0.6, idle_days=1, decay_kept=True), exactly_at_the_line) == (0.3, False, None)
    pending = memory(importance=0.5, idle_days=17, decay_kept=True, review_pending="promote")
    assert outcome(pending) == (pytest.approx(0.5 * 0.95**10), False, None)  # never while any review is pending


def test_decay_days_count_whole_days_after_the_grace_period() -> None:
    assert [decay_days(memory(idle_days=days), NOW, POLICY) for days in (0, 7, 7.5, 8, 30)] == [0, 0, 0, 1, 23]
    assert decay_days(memory(idle_days=8), NOW, MemoryPolicy(grace_days=2)) == 6


def test_a_persona_can_override_the_numbers_but_not_invent_new_ones() -> None:
    strict = POLICY.overridden({"fact_factor": 0.5, "grace_days": 0})
    assert decay_outcome(memory(idle_days=2), NOW, strict).importance == 0.25
    assert POLICY.fact_factor == 0.95  # the default is untouched
    with pytest.raises(ValueError, match="unknown memory rules: fact_facter"):
        POLICY.overridden({"fact_facter": 0.5})


def test_a_boost_adds_point_three() -> None:
    assert boosted(memory(importance=1.2), POLICY) == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("record", "boosted_to", "expected"),
    [
        (memory(importance=2.2), 2.5, True),
        (memory(importance=2.2), 2.49, False),
        (memory(importance=2.3), 2.6, True),
        (memory(importance=2.5), 2.8, False),  # already at the line: kept by a promote review, or never reviewed
        (memory(importance=2.6, idle_days=8), 2.77, True),  # faded below the line (2.47) since: reviewed again
        (memory("core", 2.3), 2.6, False),
        (memory("episode", 2.3), 2.6, False),
        (memory(importance=2.3, review_pending="decay"), 2.6, False),
    ],
)
def test_a_boost_across_two_and_a_half_asks_for_a_promote_review(
    record: MemoryRecord, boosted_to: float, expected: bool
) -> None:
    record = replace(record, importance=current_importance(record, NOW, POLICY))  # as the store reads it
    assert needs_promote_review(record, boosted_to, POLICY) is expected


def test_importance_is_the_base_until_the_grace_period_ends_then_decays() -> None:
    assert current_importance(memory(importance=1.2, idle_days=7.99), NOW, POLICY) == 1.2
    assert current_importance(memory(importance=1.2, idle_days=9), NOW, POLICY) == pytest.approx(1.2 * 0.95**2)
    assert current_importance(memory("core", 1.2, idle_days=90), NOW, POLICY) == 1.2


# -- next_due: the first moment the decay pass has something to do -------------------------------


def test_what_never_decays_or_waits_for_a_review_without_a_retry_time_is_never_due() -> None:
    for record in (
        memory("system", idle_days=400),
        memory("core", idle_days=400),
        memory(importance=3.0),
        memory(importance=0.2, review_pending="decay"),
        memory(importance=0.2, decay_kept=True, review_pending="promote"),
    ):
        assert next_due(record, POLICY) is None, record
    assert next_due(memory(importance=0.9), MemoryPolicy(fact_factor=1.0)) is None  # a persona without decay


def test_an_episode_is_due_at_its_maximum_age_whenever_it_was_last_used() -> None:
    assert next_due(memory("episode", 3.5, idle_days=1, age_days=5), POLICY) == NOW + timedelta(days=9)


@pytest.mark.parametrize(
    ("record", "policy", "days"),
    [
        (memory(), POLICY, 7 + 14),  # 0.95**13 = 0.513, 0.95**14 = 0.488: reviewed
        (memory(importance=1.8), POLICY, 7 + 25),  # 1.8 * 0.95**24 = 0.526, 1.8 * 0.95**25 = 0.499
        (memory(importance=0.5), POLICY, 7 + 1),  # at the line is not below it
        (memory(importance=0.5, decay_kept=True), POLICY, 7 + 10),  # kept: deleted at 0.299, no review
        (memory(importance=0.6, decay_kept=True), MemoryPolicy(fact_factor=0.5, grace_days=0), 2),  # 0.3 stays
        (memory(importance=0.6), MemoryPolicy(decay_review_below=0.2), 7 + 14),  # deleted at 0.293: the higher line
    ],
)
def test_a_fact_is_due_on_the_day_its_decay_crosses_the_line(
    record: MemoryRecord, policy: MemoryPolicy, days: int
) -> None:
    due = next_due(record, policy)
    assert due == record.last_access + timedelta(days=days)
    before = decay_outcome(record, due - timedelta(microseconds=1), policy)
    at = decay_outcome(record, due, policy)
    assert (before.delete, before.review) == (False, None)
    assert at.delete or at.review == "decay"


def test_a_fact_already_below_its_line_is_due_at_once() -> None:
    assert next_due(memory(importance=0.4, idle_days=2), POLICY) == NOW - timedelta(days=2)
    assert next_due(memory(importance=0.25, idle_days=2, decay_kept=True), POLICY) == NOW - timedelta(days=2)
    assert decay_outcome(memory(importance=0.4, idle_days=2), NOW, POLICY).review == "decay"


@pytest.mark.parametrize("base", [0.5, 0.97, 1.0, 1.3, 1.57, 2.2, 2.999999999])
@pytest.mark.parametrize("kept", [False, True])
def test_next_due_agrees_with_the_outcome_to_the_microsecond(base: float, kept: bool) -> None:
    record = memory(importance=base, decay_kept=kept)
    due = next_due(record, POLICY)
    assert due is not None
    acts = [decay_outcome(record, moment, POLICY) for moment in (due - timedelta(microseconds=1), due)]
    assert [outcome.delete or outcome.review is not None for outcome in acts] == [False, True]


def test_a_factor_that_would_grow_importance_is_refused() -> None:
    with pytest.raises(ValueError, match="fact_factor"):
        POLICY.overridden({"fact_factor": 1.05})
    with pytest.raises(ValueError, match="episode_factor"):
        MemoryPolicy(episode_factor=0)


def test_a_boost_counts_from_now_adds_a_hit_and_asks_nothing_below_the_promote_line() -> None:
    record = replace(memory(importance=1.0, idle_days=20), hits=2)
    assert after_boost(record, NOW, POLICY) == MemoryChange(importance=1.3, last_access=NOW, hits=3, decay_kept=False)


def test_a_boost_across_the_promote_line_asks_for_a_promote_review() -> None:
    change = after_boost(memory(importance=2.3), NOW, POLICY)
    assert change.importance == 2.6 and change.review_pending == "promote"


def test_a_boost_that_stays_below_the_decay_review_line_leaves_a_decay_keep_in_force() -> None:
    record = memory(importance=0.1, decay_kept=True)
    assert after_boost(record, NOW, POLICY).decay_kept is KEEP  # 0.4: a fall from here is not reviewed again
    assert after_boost(memory(importance=0.2, decay_kept=True), NOW, POLICY).decay_kept is False  # 0.5: re-armed


def test_a_promote_verdict_makes_the_memory_core_and_clears_the_review() -> None:
    record = memory(importance=2.6, review_pending="promote")
    assert after_review(record, "promote", "promote", NOW, POLICY) == MemoryChange(
        category="core", review_pending=CLEAR
    )


def test_a_keep_on_a_promote_review_only_clears_the_review() -> None:
    record = memory(importance=2.6, review_pending="promote")
    assert after_review(record, "promote", "keep", NOW, POLICY) == MemoryChange(review_pending=CLEAR)


def test_a_keep_on_a_decay_review_resets_importance_from_now_and_marks_it_kept() -> None:
    record = memory(importance=0.42, idle_days=30, review_pending="decay")
    change = after_review(record, "decay", "keep", NOW, POLICY)
    assert change == MemoryChange(importance=0.5, last_access=NOW, decay_kept=True, review_pending=CLEAR)
    boosted_since = replace(record, importance=0.8)
    assert after_review(boosted_since, "decay", "keep", NOW, POLICY).importance == 0.8  # a boost is not undone
