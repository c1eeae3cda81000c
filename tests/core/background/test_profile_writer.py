"""The profile, end to end on a fake clock: facts told in chat mark the scope, the hourly pass writes the portrait
with the summarizer's model (at most daily, never for unchanged facts), and every private prompt carries it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from bot.app import App
from core.background.checkpoint import Checkpoint, Stage
from core.background.profile_writer import PROFILE_TOKENS, SHORTER, fitted
from core.llm.client import count_tokens
from knowledge.records import Scope
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import (
    CHAT,
    MONITOR,
    SUMMARIZER,
    Body,
    Person,
    memories_in,
    monitor_rules,
    prompt_text,
    system_message,
)

FACTS_EN = {
    "I'm a nurse": "[ADD] Alice works as a nurse in Leeds",
    "my sister": "[ADD] Alice's sister Anna visits on Sundays",
    "ramen": "[ADD] Alice loves ramen",
}
PORTRAIT_EN = "Alice is a nurse in Leeds. Her sister Anna visits on Sundays. She loves ramen."
FACTS_ZH = {
    "我是护士": "[ADD] 主人是上海的护士",
    "妹妹": "[ADD] 主人的妹妹小美每周日来看她",
    "拉面": "[ADD] 主人喜欢拉面",
}
PORTRAIT_ZH = "主人是上海的护士，妹妹小美每周日来看她。主人喜欢拉面。"


def profile_requests(fake: FakeOpenAIServer) -> list[str]:
    return [prompt_text(request) for request in fake.requests_for(SUMMARIZER) if "<<<MEMORIES" in prompt_text(request)]


def summarizer(portrait: str | Callable[[Body], str]) -> Callable[[Body], str]:
    """The summarizer's model: the portrait for a profile prompt, an episode note otherwise."""

    def answer(body: Body) -> str:
        if "<<<MEMORIES" not in prompt_text(body):
            return "They chatted."
        return portrait(body) if callable(portrait) else portrait

    return answer


async def tell(person: Person, app: App, lines: list[str]) -> None:
    for line in lines:
        await person.say(line)
        await app.companion.tasks.drain()


@pytest.mark.parametrize(
    ("facts", "portrait", "lines", "asked"),
    [
        (FACTS_EN, PORTRAIT_EN, ["I'm a nurse in Leeds", "my sister Anna comes on Sundays", "I love ramen"], "hi"),
        (FACTS_ZH, PORTRAIT_ZH, ["我是护士，在上海", "我妹妹小美每周日来", "我喜欢拉面"], "晚上好"),
    ],
    ids=["en", "zh"],
)
async def test_facts_told_in_chat_become_a_profile_that_every_later_prompt_and_memory_listing_carries(
    app: App,
    fake_openai: FakeOpenAIServer,
    clock: FakeClock,
    alice: Scope,
    facts: dict[str, str],
    portrait: str,
    lines: list[str],
    asked: str,
) -> None:
    fake_openai.set_default(MONITOR, monitor_rules(facts))
    fake_openai.set_default(SUMMARIZER, summarizer(portrait))
    fake_openai.set_default(CHAT, "OK")
    person = Person(app.companion, clock)
    await tell(person, app, lines)
    assert await app.lifecycle.write_profiles() == 1
    await app.companion.tasks.drain()

    [request] = profile_requests(fake_openai)
    assert all(fact.removeprefix("[ADD] ") in request for fact in facts.values())  # written from the facts
    profile = app.journal.profiles.get(alice)
    assert profile is not None and profile.text == portrait and profile.author == "background"
    assert set(profile.memory_ids) == {record.id for record in app.knowledge.memories(alice)}
    await person.say(asked)
    assert portrait in system_message(fake_openai.requests_for(CHAT)[-1])  # always in the prompt
    listing = await app.companion.memory_listing(alice)
    assert listing.index(portrait) < listing.index("What I remember about you")  # shown first


async def test_a_profile_is_rewritten_at_most_daily_and_never_for_facts_that_did_not_change(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope
) -> None:
    fake_openai.set_default(MONITOR, monitor_rules({**FACTS_EN, "cats": "[ADD] Alice has two cats"}))
    fake_openai.set_default(SUMMARIZER, summarizer(PORTRAIT_EN))
    fake_openai.set_default(CHAT, "OK")
    person = Person(app.companion, clock)
    await tell(person, app, ["I'm a nurse", "my sister Anna", "ramen please"])
    await app.lifecycle.write_profiles()
    await app.companion.tasks.drain()
    await tell(person, app, ["I have two cats"])  # a new fact, the same day
    assert await app.lifecycle.write_profiles() == 0  # waits for the day to be over
    clock.advance(hours=23)
    assert await app.lifecycle.write_profiles() == 0
    clock.advance(hours=1)
    assert await app.lifecycle.write_profiles() == 1
    await app.companion.tasks.drain()
    assert len(profile_requests(fake_openai)) == 2 and "two cats" in profile_requests(fake_openai)[-1]
    assert PORTRAIT_EN in profile_requests(fake_openai)[-1]  # the earlier profile, to revise

    await tell(person, app, ["how are you"])  # nothing learned: nothing marked
    clock.advance(days=2)
    assert await app.lifecycle.write_profiles() == 0
    app.journal.profiles.mark_changed(alice, clock.now())  # marked, but the facts read as before
    assert await app.lifecycle.write_profiles() == 1
    await app.companion.tasks.drain()
    assert len(profile_requests(fake_openai)) == 2  # no model call for the same facts
    assert app.journal.profiles.due(clock.now() + timedelta(days=3)) == []


async def test_too_few_facts_make_no_profile(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope
) -> None:
    fake_openai.set_default(MONITOR, monitor_rules(FACTS_EN))
    fake_openai.set_default(CHAT, "OK")
    await tell(Person(app.companion, clock), app, ["I love ramen"])
    assert await app.lifecycle.write_profiles() == 1
    await app.companion.tasks.drain()
    assert profile_requests(fake_openai) == [] and app.journal.profiles.get(alice) is None


async def test_a_profile_too_long_is_asked_shorter_then_cut_at_a_sentence(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope
) -> None:
    rambling = " ".join(f"Alice said thing number {n} about her day." for n in range(80))
    fake_openai.set_default(MONITOR, monitor_rules(FACTS_EN))
    fake_openai.set_default(SUMMARIZER, summarizer(rambling))
    fake_openai.set_default(CHAT, "OK")
    await tell(Person(app.companion, clock), app, ["I'm a nurse", "my sister Anna", "ramen"])
    await app.lifecycle.write_profiles()
    await app.companion.tasks.drain()
    [_, again] = profile_requests(fake_openai)
    assert SHORTER.format(tokens=count_tokens(rambling), limit=PROFILE_TOKENS) in again
    profile = app.journal.profiles.get(alice)
    assert profile is not None and count_tokens(profile.text) <= PROFILE_TOKENS
    assert profile.text.endswith("about her day.") and rambling.startswith(profile.text)


def test_fitting_keeps_whole_sentences_in_english_and_chinese() -> None:
    english = "She is a nurse. " * 200
    chinese = "主人是护士。" * 300
    for text in (english, chinese):
        cut = fitted(text.strip())
        assert 0 < count_tokens(cut) <= PROFILE_TOKENS and cut[-1] in ".。" and text.startswith(cut)
    assert fitted("short.") == "short."


async def test_a_rerun_after_a_crash_writes_the_saved_text_without_asking_again(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope
) -> None:
    fake_openai.set_default(MONITOR, monitor_rules(FACTS_EN))
    fake_openai.set_default(SUMMARIZER, summarizer(PORTRAIT_EN))
    fake_openai.set_default(CHAT, "OK")
    await tell(Person(app.companion, clock), app, ["I'm a nurse", "my sister Anna", "ramen"])
    writer = app.lifecycle._profile_writer
    assert writer is not None
    saved: dict[str, object] = {}

    def crash(point: str) -> None:
        if point.startswith("profile:"):
            raise RuntimeError("killed")

    persona = app.companion.persona()
    with pytest.raises(RuntimeError):
        await writer.rewrite(persona, alice, clock.now(), Checkpoint(None, saved.update, crash))
    assert app.journal.profiles.get(alice) is None and Stage.PROFILE in saved
    assert await writer.rewrite(persona, alice, clock.now(), Checkpoint(saved)) is not None
    assert len(profile_requests(fake_openai)) == 1
    assert app.journal.profiles.get(alice).text == PORTRAIT_EN  # type: ignore[union-attr]


GROUP = "telegram:chat:-1001"


@pytest.mark.parametrize("learned_in", [None, GROUP], ids=["private", "in the group"])
async def test_a_group_prompt_carries_the_profile_only_if_every_memory_it_was_written_from_may_be_used_there(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope, learned_in: str | None
) -> None:
    for fact in ("Alice works as a nurse in Leeds", "Alice's sister Anna visits on Sundays", "Alice loves ramen"):
        app.knowledge.add(alice, fact, category="fact", source="user", learned_in=learned_in)
    fake_openai.set_default(SUMMARIZER, summarizer(PORTRAIT_EN))
    fake_openai.set_default(CHAT, "OK")
    app.journal.profiles.mark_changed(alice, clock.now())
    await app.lifecycle.write_profiles()
    await app.companion.tasks.drain()
    in_group = Person(app.companion, clock, conversation_id=GROUP)

    await in_group.say("hello everyone", group=True)
    assert (PORTRAIT_EN in system_message(fake_openai.requests_for(CHAT)[-1])) is (learned_in == GROUP)
    await app.companion.share(alice, "on")  # everything may be used in groups
    await in_group.say("hello again", group=True)
    assert PORTRAIT_EN in system_message(fake_openai.requests_for(CHAT)[-1])
    await Person(app.companion, clock).say("hi")  # in private always
    assert PORTRAIT_EN in system_message(fake_openai.requests_for(CHAT)[-1])


async def test_a_memory_the_monitor_deletes_as_wrong_takes_the_profile_written_from_it_along(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope
) -> None:
    def delete_ramen(body: Body) -> str:
        [wrong] = [memory_id for memory_id, content in memories_in(body).items() if "ramen" in content]
        return f"[DELETE:{wrong}]"

    fake_openai.set_default(MONITOR, monitor_rules({"hate ramen": delete_ramen, **FACTS_EN}))
    fake_openai.set_default(SUMMARIZER, summarizer(PORTRAIT_EN))
    fake_openai.set_default(CHAT, "OK")
    person = Person(app.companion, clock)
    await tell(person, app, ["I'm a nurse", "my sister Anna", "ramen"])
    await app.lifecycle.write_profiles()
    await app.companion.tasks.drain()
    assert app.journal.profiles.get(alice) is not None
    await tell(person, app, ["no, I hate ramen"])
    assert app.journal.profiles.get(alice) is None  # cleared at once, written again from what remains
    assert app.journal.profiles.due(clock.now() + timedelta(days=1)) == [alice]
