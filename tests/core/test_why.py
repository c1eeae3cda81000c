"""Reply traces and `/why`: what each answered turn's prompt held is kept by id, read back in its own scope only,
and goes with the user when they are forgotten."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from bot.app import App, build_app
from bot.config import Settings
from core import phrasebook
from core.companion import Companion
from core.why import NO_TRACE
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
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


async def test_a_user_over_the_daily_quota_gets_a_short_answer_without_a_model_call_until_their_midnight(
    settings: Settings,
    clock: FakeClock,
    embedder: Embedder,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    bob: Scope,
) -> None:
    fake_openai.set_default(CHAT, "Sure, tell me more!")
    limited = settings.changed(usage={"daily_tokens": 1, "exempt": ["cli:bob"]}, timezone="Asia/Tokyo")
    async with await build_app(limited, clock=clock, embedder=embedder) as app:
        assert await say(app.companion, "hi") == "Sure, tell me more!"  # the first turn spends the day's tokens
        asked = len(fake_openai.requests_for(CHAT))
        assert await say(app.companion, "are you there?") == phrasebook.OVER_QUOTA
        assert len(fake_openai.requests_for(CHAT)) == asked  # no model call
        assert await say(app.companion, "hi", user_id="cli:bob") == "Sure, tell me more!"  # exempt
        spent, limit = await app.companion.tokens_today(alice)
        assert spent > 1 and limit == 1 and (await app.companion.tokens_today(bob))[1] is None
        person = app.links.join("cli:bob", "telegram:7", clock.now()).person_id
        assert await app.companion.tokens_today(Scope(bob.persona_id, person)) == (0, None)  # exempt when linked too
        to_midnight = 24 - clock.now().astimezone(ZoneInfo("Asia/Tokyo")).hour  # the clock is on the hour
        clock.advance(hours=to_midnight - 0.01)  # still the same day in Tokyo, whatever the day in UTC
        assert await say(app.companion, "still there?") == phrasebook.OVER_QUOTA
        clock.advance(hours=0.02)
        assert await say(app.companion, "good morning") == "Sure, tell me more!"


async def test_a_persona_may_set_its_own_daily_quota(
    settings: Settings, clock: FakeClock, embedder: Embedder, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    settings.own_persona_dir.mkdir(parents=True)
    (settings.own_persona_dir / "mia.yaml").write_text(
        "id: mia\nname: Mia\npersonality: cheerful\ngreetings: [hi]\ndaily_tokens: 0\n"
    )
    fake_openai.set_default(CHAT, "Sure!")
    async with await build_app(settings.changed(usage={"daily_tokens": 1}), clock=clock, embedder=embedder) as app:
        assert await say(app.companion, "hi") == "Sure!"
        assert await say(app.companion, "hi again") == phrasebook.OVER_QUOTA  # the setting's quota, spent
        mia = make_message("hi", persona_id="mia")
        assert await (await app.companion.handle(mia)).text() == "Sure!"  # Mia sets none
        assert (await app.companion.tokens_today(Scope("mia", alice.user_id)))[1] is None
