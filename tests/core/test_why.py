"""Reply traces and `/why`: what each answered turn's prompt held is kept by id, read back in its own scope only,
and goes with the user when they are forgotten."""

from __future__ import annotations

from bot.app import App
from core.companion import Companion
from core.why import NO_TRACE
from knowledge.records import Scope
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT

TRIP = "Alice is saving for a trip to Lisbon"


async def say(companion: Companion, text: str, user_id: str = "cli:alice") -> str:
    result = await companion.handle(make_message(text, user_id=user_id, speaker_name=user_id[4:].title()))
    return await result.text()


async def test_a_reply_keeps_the_ids_of_its_prompt_and_why_says_them_in_plain_words(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope, bob: Scope
) -> None:
    trip = app.knowledge.add(alice, TRIP, category="fact", source="user")
    app.knowledge.add(bob, "Bob's secret: he fears spiders", category="fact", source="user")
    fake_openai.set_default(CHAT, "Lisbon, I think!")
    assert await say(app.companion, "what am I saving for?") == "Lisbon, I think!"
    await app.tasks.drain()

    [trace] = app.journal.traces.recent(alice)
    assert trip.id in trace.memory_ids and trace.model == "chat-model" and trace.window_messages >= 1
    assert trace.prompt_tokens > 0 and trace.completion_tokens > 0 and trace.total_ms >= trace.first_ms >= 0
    stored = app.journal.traces._db.query("SELECT * FROM reply_traces")  # ids and counts, no text
    assert not any("Lisbon" in str(value) or "saving" in str(value) for row in stored for value in dict(row).values())

    why = await app.companion.why_listing(alice)
    assert TRIP in why and "spiders" not in why and "last reply" in why
    assert await app.companion.why_listing(bob) == NO_TRACE  # Bob has had no reply: nothing of Alice's

    await app.forgetting.memories(alice, [trip.id], actor="operator")
    assert "forgotten since" in await app.companion.why_listing(alice) and TRIP not in await app.companion.why_listing(
        alice
    )
    await app.companion.forget_everything(alice)
    assert app.journal.traces.recent(alice) == [] and await app.companion.why_listing(alice) == NO_TRACE


async def test_why_answers_in_the_terminal(app: App, fake_openai: FakeOpenAIServer, alice: Scope) -> None:
    app.knowledge.add(alice, TRIP, category="fact", source="user")
    fake_openai.set_default(CHAT, "Lisbon!")
    await say(app.companion, "what am I saving for?")
    from tests.core.test_forgetting import terminal

    assert TRIP in await terminal(app.companion, "/why")


async def test_old_traces_are_pruned(app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope) -> None:
    fake_openai.set_default(CHAT, "Hello!")
    await say(app.companion, "hi")
    assert len(app.journal.traces.recent(alice)) == 1
    clock.advance(days=app.settings.web.trace_days - 1)
    await app.prune()
    assert len(app.journal.traces.recent(alice)) == 1
    clock.advance(days=2)
    await app.prune()
    assert app.journal.traces.recent(alice) == []
