"""MemoryLifecycle: which events become which durable jobs, and what the scheduled passes hand on."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from bot.app import App, build_app
from bot.config import Settings
from core.background.knowledge_monitor import Turn
from core.background.lifecycle import MonitorJob, ReviewJob, SummarizeJob
from core.types import StoredTurn
from knowledge.journal.token_usage import SPARED
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer


def turn(conversation_id: str = "dm:cli:alice") -> Turn:
    return Turn(
        user_text="I adopted a cat",
        reply_text="What is its name?",
        speaker_name="Alice",
        persona_name="小祥",
        user_title="主人",
        shown_ids=("mem_1",),
        conversation_id=conversation_id,
        message_ids=("msg_1", "msg_2"),
        group=False,
    )


def pending(app: App) -> list[tuple[str, Scope, dict[str, object]]]:
    return [(job.kind, job.scope, job.payload) for job in app.journal.jobs.pending_jobs()]


def say(app: App, scope: Scope, text: str, conversation_id: str = "dm:cli:alice") -> None:
    app.working_memory.append(
        scope.persona_id,
        conversation_id,
        role="user",
        user_id=scope.user_id,
        speaker_name="Alice",
        content=text,
        sent_at=app.companion.clock.now(),
    )


async def test_a_started_turn_writes_its_monitor_job_at_once_and_holds_it_until_the_turn_ends(
    app: App, alice: Scope
) -> None:
    end = app.lifecycle.turn_started(alice, "dm:cli:alice", "msg_1", group=False)
    held = {"conversation_id": "dm:cli:alice", "message_id": "msg_1", "group": False}  # ids, never text
    assert pending(app) == [(MonitorJob.KIND, alice, held)]
    await app.companion.tasks.drain()
    assert pending(app) == [(MonitorJob.KIND, alice, held)]  # not started while the turn goes on

    end(StoredTurn(message_id="msg_1", reply_id="msg_2", reply_text="What is its name?", shown_ids=("mem_1",)))
    assert pending(app) == [(MonitorJob.KIND, alice, {**held, "reply_id": "msg_2", "shown_ids": ["mem_1"]})]
    await app.companion.tasks.drain()
    assert pending(app) == []


async def test_a_turn_whose_conversation_overflowed_also_queues_a_summary_reply_or_not(app: App, alice: Scope) -> None:
    end = app.lifecycle.turn_started(alice, "dm:cli:alice", "msg_1", group=False)
    say(app, alice, "hello")
    app.working_memory.close_window(alice.persona_id, "dm:cli:alice")  # as an overflow leaves it: archived
    end(None)
    assert [kind for kind, _, _ in pending(app)] == [MonitorJob.KIND, SummarizeJob.KIND]
    assert pending(app)[1] == (SummarizeJob.KIND, alice, {"conversation_id": "dm:cli:alice"})
    await app.companion.tasks.drain()


@pytest.mark.parametrize(
    ("payload", "stored"),
    [
        (
            MonitorJob("dm:cli:alice", "msg_1", False),
            {"conversation_id": "dm:cli:alice", "message_id": "msg_1", "group": False},
        ),
        (
            MonitorJob("g:1", "msg_1", True, "msg_2", ("mem_1",)),
            {
                "conversation_id": "g:1",
                "message_id": "msg_1",
                "group": True,
                "reply_id": "msg_2",
                "shown_ids": ["mem_1"],
            },
        ),
        (SummarizeJob("dm:cli:alice"), {"conversation_id": "dm:cli:alice"}),
        (ReviewJob("mem_1", "decay"), {"memory_id": "mem_1", "kind": "decay"}),
    ],
)
def test_each_job_kind_is_stored_as_jobs_always_were_and_read_back(
    payload: MonitorJob | SummarizeJob | ReviewJob, stored: dict[str, object]
) -> None:
    assert payload.to_json() == stored
    assert type(payload).from_json(json.loads(json.dumps(stored))) == payload


async def test_a_monitor_job_written_before_jobs_carried_message_ids_still_runs(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default("monitor-model", "[SKIP]")
    app.journal.jobs.enqueue(MonitorJob.KIND, alice, {"turn": asdict(turn())}, at=app.companion.clock.now())
    app.companion.tasks.resume()
    await app.companion.tasks.drain()
    [request] = fake_openai.requests_for("monitor-model")
    assert "I adopted a cat" in request.messages[1]["content"] and pending(app) == []


async def test_the_decay_pass_queues_a_decay_review_for_each_memory_that_asks_for_one(
    app: App, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope
) -> None:
    fading = kb.add(alice, "Alice once tried Vue", category="fact", source="user", importance=0.6)
    kb.add(alice, "Alice loves ramen", category="fact", source="user", importance=2.0)
    fake_openai.script("reviewer-model", "Still true. [KEEP]")
    clock.advance(days=12)  # 0.6 x 0.95^5 < 0.5: the first asks for a review, the second still far above

    report = await app.lifecycle.run_decay()
    await app.companion.tasks.drain()

    assert report.reviews == [(alice, fading.id, "decay")]
    [request] = fake_openai.requests_for("reviewer-model")
    assert "Alice once tried Vue" in request.messages[1]["content"]
    assert [(change.memory_id, change.action) for change in app.journal.changes.changes(alice)] == [(fading.id, "keep")]


async def test_the_idle_pass_closes_quiet_conversations_and_queues_their_summary(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, kb: ChromaKnowledgeBase, alice: Scope
) -> None:
    for text in ("I start my new job on Monday", "at the bakery", "wish me luck"):
        say(app, alice, text)
    say(app, alice, "still here", conversation_id="dm:other")
    clock.advance(minutes=20)
    say(app, alice, "and this one is still going", conversation_id="dm:other")
    clock.advance(minutes=15)  # the first conversation is 35 minutes quiet, the second 15
    fake_openai.script("summarizer-model", "Alice starts a new job on Monday.")

    assert await app.lifecycle.summarize_idle() == 1
    await app.companion.tasks.drain()

    assert app.working_memory.window(alice.persona_id, "dm:cli:alice") == []
    assert len(app.working_memory.window(alice.persona_id, "dm:other")) == 2
    [episode] = kb.memories(alice, categories=["episode"])
    assert episode.content.endswith("Alice starts a new job on Monday.")


async def test_with_the_background_off_no_event_becomes_a_job(
    settings: Settings, clock: FakeClock, embedder: Embedder, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    app = await build_app(settings, clock=clock, embedder=embedder, background=False)
    try:
        fake_openai.script("chat-model", "What is its name?")
        reply = await app.companion.handle(make_message("I adopted a cat", user_id=alice.user_id))
        assert await reply.text() == "What is its name?"
        app.lifecycle.conversation_overflowed(alice, "dm:cli:alice")
        app.lifecycle.review(alice, "mem_1", "promote")
        await app.companion.tasks.drain()
        assert pending(app) == [] and fake_openai.requests_for("monitor-model") == []
        assert app.journal.jobs.dead_letters() == []
    finally:
        await app.aclose()


async def test_review_requests_are_jobs_with_the_memory_and_the_kind(app: App, alice: Scope) -> None:
    app.lifecycle.review(alice, "mem_1", "promote")
    assert pending(app) == [(ReviewJob.KIND, alice, {"memory_id": "mem_1", "kind": "promote"})]
    await app.companion.tasks.drain()  # the memory is gone: the review ends without a model call


async def talk(app: App, text: str) -> None:
    await (await app.companion.handle(make_message(text))).text()
    await app.companion.tasks.drain()


def monitor_asked_about(fake_openai: FakeOpenAIServer) -> list[str]:
    """The user's words of each turn the monitor was asked about."""
    asked = fake_openai.requests_for("monitor-model")
    turns = [request.messages[1]["content"].split("<<<TURN", 1)[1] for request in asked]
    return [block.split("\n")[1].split(": ", 1)[1] for block in turns]


async def test_a_turn_of_small_talk_is_stored_and_searchable_but_spares_the_monitor_and_is_counted(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default("monitor-model", "[SKIP]")
    fake_openai.set_default("chat-model", "That is lovely news.")
    await talk(app, "I adopted a cat")
    await talk(app, "haha ok 😂")
    assert monitor_asked_about(fake_openai) == ["I adopted a cat"]
    assert "haha ok 😂" in [message.content for message in app.working_memory.log.messages_of(alice)]
    assert app.companion.history.indexed_count(alice) == 4  # both turns' messages, in the history index
    assert pending(app) == []
    [spared] = [usage for usage in app.journal.usage.totals() if usage.model == SPARED]
    assert (spared.role, spared.calls, spared.prompt_tokens) == ("monitor", 1, 0)


async def test_small_talk_that_answers_the_companion_question_is_seen_by_the_monitor(
    app: App, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.set_default("monitor-model", "[SKIP]")
    fake_openai.script("chat-model", "Are you moving to Berlin?", "Okay!")
    await talk(app, "big news today")
    await talk(app, "yes")
    assert monitor_asked_about(fake_openai) == ["big news today", "yes"]
    assert not [usage for usage in app.journal.usage.totals() if usage.model == SPARED]


async def test_with_the_gate_off_the_monitor_sees_small_talk_too(app: App, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_default("monitor-model", "[SKIP]")
    app.lifecycle.spare_small_talk = False
    await talk(app, "ok")
    assert monitor_asked_about(fake_openai) == ["ok"]
