"""The decay pass over real chromadb: schedules, deletions with history, reviews, idempotency.

Importance is read through the store at the clock's time; the pass itself only deletes and asks for reviews.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge.journal.change_log import LoggedChange
from knowledge.journal.journal import Journal
from knowledge.memory.chroma_store import ChromaKnowledgeBase, open_chroma_client
from knowledge.memory.decay_pass import DecayPass
from knowledge.records import Category, MemoryChange, MemoryRecord, Scope
from knowledge.rules.decay import MemoryPolicy, PolicyFor, default_policy
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock


def open_store(
    path: Path, embedder: Embedder, clock: FakeClock, policy_for: PolicyFor = default_policy
) -> ChromaKnowledgeBase:
    return ChromaKnowledgeBase(open_chroma_client(path=path / "chroma"), embedder, now=clock.now, policy_for=policy_for)


@pytest.fixture
def store(tmp_path: Path, embedder: Embedder, clock: FakeClock) -> ChromaKnowledgeBase:
    return open_store(tmp_path, embedder, clock)


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path / "journal.sqlite3")


@pytest.fixture
def decay_pass(store: ChromaKnowledgeBase, journal: Journal, clock: FakeClock) -> DecayPass:
    return DecayPass(store, journal.changes, clock.now)


def current(store: ChromaKnowledgeBase, scope: Scope, memory: MemoryRecord) -> MemoryRecord | None:
    """The stored version of `memory`, or None once it is deleted."""
    found = store.get(scope, [memory.id])
    return found[0] if found else None


def importance(store: ChromaKnowledgeBase, scope: Scope, memory: MemoryRecord) -> float | None:
    record = current(store, scope, memory)
    return None if record is None else record.importance


def test_a_fact_keeps_its_value_for_a_week_then_loses_five_percent_a_day(
    store: ChromaKnowledgeBase, decay_pass: DecayPass, clock: FakeClock, alice: Scope
) -> None:
    fact = store.add(alice, "主人喜欢拉面", category="fact", source="user")
    seen, previous = {}, 0
    for day in (7, 8, 14, 30):
        clock.advance(days=day - previous)
        previous = day
        decay_pass.apply_decay()
        seen[day] = importance(store, alice, fact)
    assert seen == {
        7: 1.0,
        8: pytest.approx(0.95, abs=1e-12),
        14: pytest.approx(0.95**7, abs=1e-12),
        30: pytest.approx(0.95**23, abs=1e-12),
    }


def test_an_episode_decays_faster_and_is_deleted_at_two_weeks_with_history(
    store: ChromaKnowledgeBase, decay_pass: DecayPass, journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    episode = store.add(alice, "[2026-01-03 18:00] talked about ramen", category="episode", source="background_ai")
    values = []
    for days in (7, 1, 5):  # days 7, 8 and 13
        clock.advance(days=days)
        decay_pass.apply_decay()
        values.append(importance(store, alice, episode))
    assert values == [1.0, pytest.approx(0.8, abs=1e-12), pytest.approx(0.8**6, abs=1e-12)]

    clock.advance(days=1)
    report = decay_pass.apply_decay()
    assert (report.deleted, current(store, alice, episode)) == (1, None)
    assert journal.changes.changes(alice) == [
        LoggedChange(episode.id, "delete", "decay", episode.content, None, "episode older than 14 days", clock.now())
    ]


def test_core_system_and_very_important_memories_never_decay(
    store: ChromaKnowledgeBase, decay_pass: DecayPass, clock: FakeClock, alice: Scope
) -> None:
    kept = [
        store.add(alice, "Alice's birthday is 3 May", category="core", source="user", importance=1.0),
        store.add(alice, "小祥 is a cat girl", category="system", source="system", importance=1.0),
        store.add(alice, "Alice is allergic to peanuts", category="fact", source="user", importance=3.0),
    ]
    clock.advance(days=100)
    report = decay_pass.apply_decay()
    assert [current(store, alice, memory) for memory in kept] == kept
    assert (report.scanned, report.deleted, report.reviews) == (0, 0, [])  # never due: not even read


def test_a_fact_falling_below_half_is_reviewed_once_and_not_deleted_while_pending(
    store: ChromaKnowledgeBase, decay_pass: DecayPass, clock: FakeClock, alice: Scope
) -> None:
    fact = store.add(alice, "主人下周二要去面试", category="fact", source="user")
    clock.advance(days=20)  # 0.95**13 = 0.513
    assert decay_pass.apply_decay().reviews == []

    clock.advance(days=1)  # 0.95**14 = 0.488
    assert decay_pass.apply_decay().reviews == [(alice, fact.id, "decay")]
    assert decay_pass.apply_decay().reviews == []  # the request is remembered on the record
    assert current(store, alice, fact).review_pending == "decay"  # type: ignore[union-attr]

    clock.advance(days=MemoryPolicy().review_retry_days - 1)  # not answered yet, and not yet its retry time
    assert decay_pass.apply_decay().scanned == 0

    clock.advance(days=10)  # 0.95**26 = 0.264: below the deletion line, but the reviewer never answered
    report = decay_pass.apply_decay()
    assert (report.deleted, report.reviews) == (0, [(alice, fact.id, "decay")])  # asked again, not deleted
    assert importance(store, alice, fact) == pytest.approx(0.95**26, abs=1e-12)
    assert decay_pass.apply_decay().scanned == 0  # and the new request waits for its own retry time


def test_a_fact_kept_by_a_review_decays_again_and_is_deleted_without_another_review(
    store: ChromaKnowledgeBase, decay_pass: DecayPass, journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    fact = store.add(alice, "主人最近在学吉他", category="fact", source="user")
    store.update(alice, fact.id, MemoryChange(importance=0.5, decay_kept=True))  # what a KEEP leaves behind
    clock.advance(days=16)  # 0.5 * 0.95**9 = 0.315
    report = decay_pass.apply_decay()
    assert (report.deleted, report.reviews) == (0, [])
    assert importance(store, alice, fact) == pytest.approx(0.5 * 0.95**9, abs=1e-12)

    clock.advance(days=1)  # 0.5 * 0.95**10 = 0.299
    report = decay_pass.apply_decay()
    assert (report.deleted, report.reviews, current(store, alice, fact)) == (1, [], None)
    assert journal.changes.changes(alice, fact.id) == [
        LoggedChange(fact.id, "delete", "decay", fact.content, None, "importance 0.299", clock.now())
    ]


def test_a_second_pass_at_the_same_moment_changes_nothing(
    store: ChromaKnowledgeBase, decay_pass: DecayPass, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    store.add(alice, "[2026-01-03 18:00] talked about exams", category="episode", source="background_ai")
    store.add(bob, "Bob likes jazz", category="fact", source="user")
    clock.advance(days=10)
    store.add(alice, "[2026-01-13 18:00] talked about jazz", category="episode", source="background_ai")
    store.add(alice, "Alice plays the cello", category="fact", source="user", importance=0.6)
    store.add(bob, "Bob's cat is called Miso", category="core", source="user")
    clock.advance(days=12)

    first = decay_pass.apply_decay()
    after_first = [store.memories(scope) for scope in (alice, bob)]
    second = decay_pass.apply_decay()
    # due: the old episode (deleted), Bob's fact (0.95**15) and Alice's (0.6 * 0.95**5), not the young episode
    assert (first.scanned, first.deleted, len(first.reviews), first.rescheduled) == (3, 1, 2, 0)
    assert (second.scanned, second.deleted, second.reviews) == (0, 0, [])
    assert [store.memories(scope) for scope in (alice, bob)] == after_first


def test_missed_runs_give_the_same_state_as_daily_runs(
    tmp_path: Path, embedder: Embedder, clock: FakeClock, alice: Scope
) -> None:
    stores = {name: open_store(tmp_path / name, embedder, clock) for name in ("daily", "late")}
    journals = {name: Journal(tmp_path / f"{name}.sqlite3") for name in ("daily", "late")}
    arrivals: dict[int, list[tuple[Category, str, float, bool]]] = {
        0: [("fact", "Alice was born in Lyon", 1.0, False), ("fact", "Alice is learning Go", 1.8, False)],
        3: [("fact", "Alice is tired this week", 0.6, True)],  # kept by a decay review
        10: [("episode", "[day 10] talked about Lyon", 1.0, False)],
        15: [("fact", "Alice's sister visits in spring", 1.0, False)],
        20: [("episode", "[day 20] talked about spring plans", 1.0, False)],
    }
    daily = DecayPass(stores["daily"], journals["daily"].changes, clock.now)
    for day in range(31):
        clock.advance(days=1 if day else 0)
        for category, content, value, kept in arrivals.get(day, []):
            for store in stores.values():
                added = store.add(alice, content, category=category, source="user", importance=value)
                store.update(alice, added.id, MemoryChange(decay_kept=kept))
        daily.apply_decay()
    DecayPass(stores["late"], journals["late"].changes, clock.now).apply_decay()  # its only run, on day 30

    def state(name: str) -> dict[str, tuple[float, str | None]]:
        return {memory.content: (memory.importance, memory.review_pending) for memory in stores[name].memories(alice)}

    def deleted(name: str) -> list[str]:
        return sorted(
            entry.old_content or "" for entry in journals[name].changes.changes(alice) if entry.action == "delete"
        )

    assert state("daily") == state("late")
    assert state("late") == {
        "Alice was born in Lyon": (pytest.approx(0.95**23, abs=1e-12), "decay"),
        "Alice is learning Go": (pytest.approx(1.8 * 0.95**23, abs=1e-12), None),
        "Alice's sister visits in spring": (pytest.approx(0.95**8, abs=1e-12), None),
        "[day 20] talked about spring plans": (pytest.approx(0.8**3, abs=1e-12), None),
    }
    assert deleted("daily") == deleted("late") == ["Alice is tired this week", "[day 10] talked about Lyon"]


def test_each_scope_decays_from_its_own_last_access(
    store: ChromaKnowledgeBase, decay_pass: DecayPass, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    bobs = store.add(bob, "likes ramen", category="fact", source="user")
    clock.advance(days=10)
    alices = store.add(alice, "likes ramen", category="fact", source="user")
    clock.advance(days=10)
    decay_pass.apply_decay()
    assert importance(store, alice, alices) == pytest.approx(0.95**3, abs=1e-12)
    assert importance(store, bob, bobs) == pytest.approx(0.95**13, abs=1e-12)


def test_a_persona_override_applies_to_that_persona_only(
    tmp_path: Path, embedder: Embedder, journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    strict, strict_rules = Scope("strict", alice.user_id), MemoryPolicy(fact_factor=0.5)
    store = open_store(
        tmp_path, embedder, clock, lambda persona: strict_rules if persona == "strict" else MemoryPolicy()
    )
    decay_pass = DecayPass(store, journal.changes, clock.now)
    lenient = store.add(alice, "likes ramen", category="fact", source="user")
    harsh = store.add(strict, "likes ramen", category="fact", source="user")
    clock.advance(days=9)
    report = decay_pass.apply_decay()
    assert importance(store, alice, lenient) == pytest.approx(0.95**2, abs=1e-12)
    assert importance(store, strict, harsh) == pytest.approx(0.25)
    assert report.reviews == [(strict, harsh.id, "decay")]


def test_the_pass_leaves_last_access_base_content_and_vector_alone(
    store: ChromaKnowledgeBase, decay_pass: DecayPass, clock: FakeClock, alice: Scope
) -> None:
    fact = store.add(alice, "Alice plays the cello", category="fact", source="user", importance=1.2)
    before = store.search(alice, "music instrument", limit=1)[0].similarity
    clock.advance(days=10)
    decay_pass.apply_decay()
    [hit] = store.search(alice, "music instrument", limit=1)
    assert hit.similarity == before
    assert hit.record.importance == pytest.approx(1.2 * 0.95**3, abs=1e-12)
    assert (hit.record.content, hit.record.last_access, hit.record.base_importance) == (
        fact.content,
        fact.last_access,
        1.2,
    )


def test_pages_are_read_by_id_so_deleting_on_one_page_skips_nothing_on_the_next(
    store: ChromaKnowledgeBase, journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    episodes = [store.add(alice, f"[day 0] episode {n}", category="episode", source="background_ai") for n in range(3)]
    facts = [store.add(alice, f"fact {n}", category="fact", source="user") for n in range(3)]
    clock.advance(days=21)  # the episodes are too old, the facts cross 0.5
    report = DecayPass(store, journal.changes, clock.now, page_size=2).apply_decay()
    assert (report.scanned, report.deleted, len(report.reviews)) == (6, 3, 3)
    assert [current(store, alice, episode) for episode in episodes] == [None] * 3
    assert [current(store, alice, fact).review_pending for fact in facts] == ["decay"] * 3  # type: ignore[union-attr]


def test_the_pass_reads_only_the_memories_that_are_due(
    store: ChromaKnowledgeBase, decay_pass: DecayPass, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    fading = store.add(alice, "Alice had a cold last week", category="fact", source="user")
    clock.advance(days=20)
    fresh = store.add(bob, "Bob started a new job", category="fact", source="user")
    core = store.add(bob, "Bob's name is Robert", category="core", source="user")
    clock.advance(days=1)  # Alice's fact crosses 0.5; Bob's memories are a day old or never fade
    report = decay_pass.apply_decay()
    assert (report.scanned, report.reviews) == (1, [(alice, fading.id, "decay")])
    assert (current(store, bob, fresh), current(store, bob, core)) == (fresh, core)


def test_a_boost_postpones_the_day_the_fact_is_due(
    store: ChromaKnowledgeBase, decay_pass: DecayPass, clock: FakeClock, alice: Scope
) -> None:
    fact = store.add(alice, "Alice likes climbing", category="fact", source="user")
    clock.advance(days=20)
    store.update(alice, fact.id, MemoryChange(importance=1.3, last_access=clock.now()))  # what a BOOST writes
    clock.advance(days=1)  # the day the unused fact would have been reviewed
    assert decay_pass.apply_decay().scanned == 0
    clock.advance(days=7 + 18 - 1)  # 1.3 * 0.95**18 = 0.517
    assert decay_pass.apply_decay().scanned == 0
    clock.advance(days=1)  # 1.3 * 0.95**19 = 0.491
    assert decay_pass.apply_decay().reviews == [(alice, fact.id, "decay")]


def test_importance_fades_with_the_clock_without_any_pass(
    store: ChromaKnowledgeBase, clock: FakeClock, alice: Scope
) -> None:
    fact = store.add(alice, "Alice is learning to swim", category="fact", source="user")
    clock.advance(days=12)
    assert importance(store, alice, fact) == pytest.approx(0.95**5, abs=1e-12)
    clock.advance(days=1)
    assert importance(store, alice, fact) == pytest.approx(0.95**6, abs=1e-12)


def test_a_memory_due_under_old_rules_is_rescheduled_once(
    tmp_path: Path, embedder: Embedder, journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    written = open_store(tmp_path, embedder, clock)
    fact = written.add(alice, "Alice collects stamps", category="fact", source="user")
    patient = MemoryPolicy(grace_days=30)  # the persona's rules changed after the fact was written
    store = open_store(tmp_path, embedder, clock, lambda persona: patient)
    decay_pass = DecayPass(store, journal.changes, clock.now)
    clock.advance(days=21)  # due by the old rules, not the new ones
    first = decay_pass.apply_decay()
    assert (first.scanned, first.rescheduled, first.reviews) == (1, 1, [])
    assert decay_pass.apply_decay().scanned == 0
    assert importance(store, alice, fact) == 1.0
    clock.advance(days=23)  # 30 + 14 days: due by the new rules
    assert decay_pass.apply_decay().reviews == [(alice, fact.id, "decay")]


def test_reviews_beyond_the_cap_wait_for_a_later_pass(
    store: ChromaKnowledgeBase, journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    facts = [store.add(alice, f"fact {n}", category="fact", source="user") for n in range(3)]
    decay_pass = DecayPass(store, journal.changes, clock.now, max_reviews=2)
    clock.advance(days=30)  # all three fell below 0.5 while the bot was down
    first = decay_pass.apply_decay()
    assert (len(first.reviews), first.capped) == (2, True)
    second = decay_pass.apply_decay()
    assert (len(second.reviews), second.capped) == (1, False)
    assert {memory_id for _, memory_id, _ in first.reviews + second.reviews} == {fact.id for fact in facts}


def test_a_backlog_beyond_the_cap_is_read_only_as_far_as_the_cap_each_pass(
    store: ChromaKnowledgeBase, journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    facts = [store.add(alice, f"fact {n}", category="fact", source="user") for n in range(6)]
    decay_pass = DecayPass(store, journal.changes, clock.now, max_reviews=2)
    clock.advance(days=30)
    passes = [decay_pass.apply_decay()]
    for _ in range(2):
        clock.advance(days=1)
        passes.append(decay_pass.apply_decay())
    passes.append(decay_pass.apply_decay())
    # each pass reads the two it may ask about, never the ones still waiting
    assert [(p.scanned, len(p.reviews)) for p in passes] == [(2, 2), (2, 2), (2, 2), (0, 0)]
    requested = [memory_id for p in passes for _, memory_id, _ in p.reviews]
    assert sorted(requested) == sorted(fact.id for fact in facts)  # each asked for exactly once
