"""Exactly-once effects of the background jobs: a crash at any point between two writes, then a restart.

Two turns exercise every writing step of the three jobs: the monitor (an explicit "remember …", then
the model's ADD, an ADD that repeats a memory and becomes a BOOST, an UPDATE, a DELETE, a BOOST
that asks for a promote review, a CHANGE (a new memory, the old one ended) and a dated ADD; then an
explicit "forget …" that deletes a memory and the messages naming it), the summarizer (`/new` turns
the conversation into an episode) and the reviewer (the promote review). The test first lives
through it without a crash and records every crash point the jobs pass; then, for each point, it
lives through it again in a fresh data directory, "dies" there (`tests.fakes.crash`), starts a new
app on the same directory, lets it resume the pending jobs, and requires the very state of the run
that never crashed: no duplicate episode, no double boost, no lost op, no change recorded twice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.app import App, build_app
from bot.config import Settings
from core.background.checkpoint import CrashPoint, no_crash
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock
from tests.fakes.crash import CrashAt
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT, MONITOR, REVIEWER, SUMMARIZER, Body, Person, memories_in, monitor_rules

ALICE = Scope("xiaoxiang", "cli:alice")
SAID = (
    "Remember that my locker code is LOCK-9913. Also: I moved from Beijing to Shanghai, ramen is still "
    "my favourite food, I gave up the guitar, and my best friend Kai visits every summer. I work at Globex "
    "now, and my dentist appointment is next Monday."
)

FORGET = "Please forget about my ex Tom."  # the memory goes, and so does every message naming Tom: this one too


def monitor_answer(body: Body) -> str:
    """What a good monitor answers to SAID, naming the memories it was shown by their ids."""
    shown = {content.split(" (")[0]: memory_id for memory_id, content in memories_in(body).items()}
    return "\n".join(
        [
            "[ADD] Alice's best friend Kai visits every summer",
            "[ADD] Alice loves ramen",  # already known: becomes a BOOST of it
            f"[UPDATE:{shown['Alice lives in Beijing']}] Alice lives in Shanghai",
            f"[DELETE:{shown['Alice is learning the guitar']}]",
            f"[BOOST:{shown['Alice and Kai have been friends since school']}]",  # 2.3 -> 2.6: a promote review
            f"[CHANGE:{shown['Alice works at Acme']}] Alice works at Globex",  # the old job stays, as the past
            '[ADD about="next Monday"] Alice has a dentist appointment',
        ]
    )


def script(fake: FakeOpenAIServer) -> None:
    # Defaults, not queues: a re-run asks the same question again and must get the same answer.
    fake.set_default(CHAT, "Noted, all of it!")
    fake.set_default(MONITOR, monitor_rules({"locker code": monitor_answer}))
    fake.set_default(SUMMARIZER, "Alice told 小祥 about her move, ramen, the guitar and Kai.")
    fake.set_default(REVIEWER, "A lasting friendship. [PROMOTE]")


async def open_app(settings: Settings, data_dir: Path, clock: FakeClock, embedder: Embedder, hook: CrashPoint) -> App:
    return await build_app(
        settings.changed(storage={"data_dir": data_dir}),
        clock=clock,
        embedder=embedder,
        backoff=(0.01, 0.01),
        crash_point=hook,
    )


async def live_through(app: App, clock: FakeClock) -> None:
    """The turn, then `/new`, then whatever the background makes of them (until a crash, if any)."""
    kb = app.companion.knowledge
    for content, importance in [
        ("Alice loves ramen", 1.0),
        ("Alice lives in Beijing", 1.0),
        ("Alice is learning the guitar", 1.0),
        ("Alice and Kai have been friends since school", 2.3),
        ("Alice's ex Tom still texts her", 1.0),
        ("Alice works at Acme", 1.0),
    ]:
        kb.add(ALICE, content, category="fact", source="user", importance=importance)
    alice = Person(app.companion, clock)
    await alice.say(SAID)
    await alice.say(FORGET)
    for text in ("Thanks, that's all for today.", "Good night!"):  # enough left for an episode after the forget
        await alice.say(text)
    await app.companion.new_conversation(None, f"dm:{ALICE.user_id}")
    await app.companion.tasks.drain()


def state(app: App) -> dict[str, Any]:
    """Everything the jobs write, without the ids that differ from one data directory to another."""
    memories = sorted(
        (r.category, r.content, r.importance, r.hits, r.verified, r.review_pending, r.source, r.decay_kept)
        + (r.about, r.until, r.replaced_by is not None)
        for r in app.companion.knowledge.memories(ALICE)
    )
    changes = [(c.action, c.actor, c.old_content, c.new_content, c.detail) for c in app.journal.changes.changes(ALICE)]
    messages = app.working_memory.log.db.query("SELECT role, content, state FROM messages ORDER BY seq")
    return {
        "memories": memories,
        "changes": changes,
        "messages": messages,
        "pending jobs": [job.kind for job in app.journal.jobs.pending_jobs()],
        "dead letters": [letter.kind for letter in app.journal.jobs.dead_letters()],
    }


async def run(
    settings: Settings, data_dir: Path, clock: FakeClock, embedder: Embedder, hook: CrashPoint
) -> dict[str, Any]:
    first = await open_app(settings, data_dir, clock, embedder, hook)
    await live_through(first, clock)
    await first.aclose()
    # the restart: a new process on the same data directory resumes what was left pending
    second = await open_app(settings, data_dir, clock, embedder, no_crash)
    try:
        await second.start(schedule=False)
        await second.companion.tasks.drain()
        return state(second)
    finally:
        await second.aclose()


async def test_a_crash_between_any_two_writes_of_a_job_changes_nothing_after_a_restart(
    settings: Settings, fake_openai: FakeOpenAIServer, embedder: Embedder, tmp_path: Path
) -> None:
    script(fake_openai)
    recorder = CrashAt()
    expected = await run(settings, tmp_path / "uncrashed", FakeClock(), embedder, recorder)

    # the run did everything once: the proof that the comparison below means something
    kept = [memory[:8] for memory in expected["memories"]]
    assert ("fact", "Alice's best friend Kai visits every summer", 1.0, 0, False, None, "background_ai", False) in kept
    assert ("fact", "Alice loves ramen", 1.3, 1, False, None, "user", False) in kept
    assert ("core", "Alice and Kai have been friends since school", 2.6, 1, False, None, "user", False) in kept
    dated = {memory[1]: memory[8:] for memory in expected["memories"]}
    assert dated["Alice works at Acme"][1:] == (datetime(2026, 1, 3, 18, 0, tzinfo=UTC), True)  # until now, replaced
    assert dated["Alice works at Globex"] == (None, None, False)
    assert dated["Alice has a dentist appointment"] == (datetime(2026, 1, 5, tzinfo=UTC), None, False)
    assert [m[1] for m in expected["memories"] if m[0] == "episode"] == [
        "[2026-01-03 18:00] Alice told 小祥 about her move, ramen, the guitar and Kai."
    ]
    assert sorted(change[0] for change in expected["changes"]) == ["change", "delete", "delete", "promote", "update"]
    assert not [m for m in expected["memories"] if "Tom" in m[1]]
    assert [content for _, content, _ in expected["messages"] if "Tom" in content] == []
    assert expected["pending jobs"] == [] and expected["dead letters"] == []

    points = _numbered(recorder.passed)
    assert len(points) >= 14, points  # every write of the three jobs, and each job's end
    for kinds in (
        "explicit: planned",
        "model: effect 8 of 8 written",
        "explicit: forgotten",
        "explicit-last: the request's messages forgotten",
        "summarize: episode written",
    ):
        assert kinds in recorder.passed
    assert "review: verdict saved" in recorder.passed and "verdict: effect 1 of 1 written" in recorder.passed

    for index, (point, nth) in enumerate(points):
        fake_openai.reset()
        script(fake_openai)
        crash = CrashAt(point, nth)
        crashed = await run(settings, tmp_path / f"crash-{index}", FakeClock(), embedder, crash)
        assert crash.passed[-1] == point, f"never reached {point!r}"
        assert crashed == expected, f"after a crash at {point!r} (#{nth})"


def _numbered(points: list[str]) -> list[tuple[str, int]]:
    """Each point passed, with how many times it had been passed by then (a point may come up twice)."""
    seen: dict[str, int] = {}
    numbered = []
    for point in points:
        seen[point] = seen.get(point, 0) + 1
        numbered.append((point, seen[point]))
    return numbered
