"""ConversationSummarizer: archived messages become episodes in the right scope, and nothing is lost."""

from __future__ import annotations

import asyncio

import pytest

from bot.app import App
from core.background.conversation_summarizer import EPISODE_TOKENS, ConversationSummarizer, SummaryError
from core.llm.client import MESSAGE_OVERHEAD_TOKENS, count_tokens
from knowledge.conversations.working_memory import WorkingMemory
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.records import Scope
from knowledge.rules.temporal import without_stamp
from personas.loader import Persona
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer

SUMMARIZER = "summarizer-model"
DM = "dm:cli:alice"
GROUP = "discord:channel:42"


@pytest.fixture
def persona(app: App) -> Persona:
    return app.companion.persona()


@pytest.fixture
def working_memory(app: App) -> WorkingMemory:
    return app.working_memory


@pytest.fixture
def summarizer(app: App, kb: ChromaKnowledgeBase, working_memory: WorkingMemory) -> ConversationSummarizer:
    """A summarizer that writes an episode of any length: these tests are about what an episode holds (the
    minimum length the app sets has tests of its own, at the end)."""
    return ConversationSummarizer(app.llm, kb, working_memory, min_user_messages=1)


def say(
    working_memory: WorkingMemory,
    clock: FakeClock,
    conversation: str,
    scope: Scope,
    speaker: str,
    text: str,
    reply: str,
) -> None:
    """One exchange: the user's message and 小祥's reply to them."""
    for role, name, content in (("user", speaker, text), ("assistant", "小祥", reply)):
        working_memory.append(
            scope.persona_id,
            conversation,
            role=role,
            user_id=scope.user_id,
            speaker_name=name,
            content=content,
            sent_at=clock.now(),
        )
        clock.advance(minutes=1)


async def test_archived_messages_become_one_episode(
    summarizer: ConversationSummarizer,
    persona: Persona,
    working_memory: WorkingMemory,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    clock: FakeClock,
    alice: Scope,
    bob: Scope,
) -> None:
    say(working_memory, clock, DM, alice, "Alice", "明天要面试，好紧张", "别这么绷着～几点呀？")
    say(working_memory, clock, DM, alice, "Alice", "上午十点", "小祥给主人加油！")
    working_memory.close_window(persona.id, DM)
    fake_openai.script(SUMMARIZER, "主人说明天上午十点要面试、很紧张，小祥给主人加油。\n")

    [episode] = await summarizer.summarize(persona, DM)

    assert episode.content == "[2026-01-03 18:00] 主人说明天上午十点要面试、很紧张，小祥给主人加油。"
    assert (episode.scope, episode.category, episode.source) == (alice, "episode", "background_ai")
    assert episode.conversation_id == DM and len(episode.message_ids) == 4
    assert kb.memories(alice) == [episode] and kb.count(bob) == 0
    assert working_memory.archived(persona.id, DM) == []
    [request] = fake_openai.requests_for(SUMMARIZER)
    system, transcript = request.messages[0]["content"], request.messages[1]["content"]
    assert "language the conversation is in" in system and "no preamble" in system
    assert "主人: 明天要面试，好紧张\n小祥: 别这么绷着～几点呀？\n主人: 上午十点" in transcript


async def test_a_group_conversation_gives_each_user_their_own_episode(
    summarizer: ConversationSummarizer,
    persona: Persona,
    working_memory: WorkingMemory,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    clock: FakeClock,
    alice: Scope,
    bob: Scope,
) -> None:
    say(working_memory, clock, GROUP, alice, "Alice", "I got the job at the bakery!", "Congrats, Alice!")
    say(working_memory, clock, GROUP, bob, "Bob", "my password is hunter2", "Bob, please keep that private!")
    say(working_memory, clock, GROUP, alice, "Alice", "I start on Monday", "Good luck on Monday!")
    working_memory.close_window(persona.id, GROUP)
    fake_openai.script(
        SUMMARIZER,
        "Alice got a bakery job starting Monday.",
        "Bob shared a password; 小祥 told him to keep it private.",
    )

    episodes = await summarizer.summarize(persona, GROUP)

    assert [(episode.scope, episode.content) for episode in episodes] == [
        (alice, "[2026-01-03 18:00] Alice got a bakery job starting Monday."),
        (bob, "[2026-01-03 18:02] Bob shared a password; 小祥 told him to keep it private."),
    ]
    assert [record.content for record in kb.memories(alice)] == [episodes[0].content]
    for_alice, for_bob = (request.messages[1]["content"] for request in fake_openai.requests_for(SUMMARIZER))
    assert "Alice: I got the job at the bakery!" in for_alice and "Alice: I start on Monday" in for_alice
    assert "hunter2" not in for_alice and "Bob" not in for_alice
    assert "Bob: my password is hunter2" in for_bob and "bakery" not in for_bob
    assert working_memory.archived(persona.id, GROUP) == []


async def test_two_jobs_for_one_conversation_summarise_it_once(
    summarizer: ConversationSummarizer,
    persona: Persona,
    working_memory: WorkingMemory,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    clock: FakeClock,
    alice: Scope,
    bob: Scope,
) -> None:
    say(working_memory, clock, GROUP, alice, "Alice", "I got the job!", "Congrats!")
    say(working_memory, clock, GROUP, bob, "Bob", "I adopted a dog", "How lovely!")
    working_memory.close_window(persona.id, GROUP)
    fake_openai.set_default(SUMMARIZER, "They shared news.")

    # alice's and bob's job queues both asked for the group chat to be summarised
    first, second = await asyncio.gather(summarizer.summarize(persona, GROUP), summarizer.summarize(persona, GROUP))

    assert (len(first), len(second)) == (2, 0)
    assert (kb.count(alice), kb.count(bob)) == (1, 1)
    assert len(fake_openai.requests_for(SUMMARIZER)) == 2


async def test_an_empty_summary_is_an_error_and_keeps_the_messages(
    summarizer: ConversationSummarizer,
    persona: Persona,
    working_memory: WorkingMemory,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    clock: FakeClock,
    alice: Scope,
) -> None:
    say(working_memory, clock, DM, alice, "Alice", "我养了一只猫", "好可爱！叫什么名字？")
    working_memory.close_window(persona.id, DM)
    fake_openai.script(SUMMARIZER, "  \n ")

    with pytest.raises(SummaryError):
        await summarizer.summarize(persona, DM)
    assert len(working_memory.archived(persona.id, DM)) == 2
    assert kb.count(alice) == 0

    fake_openai.script(SUMMARIZER, "主人说养了一只猫。")  # the runner's retry
    [episode] = await summarizer.summarize(persona, DM)
    assert episode.content.endswith("主人说养了一只猫。")
    assert working_memory.archived(persona.id, DM) == []


async def test_nothing_archived_means_no_call(
    summarizer: ConversationSummarizer,
    persona: Persona,
    working_memory: WorkingMemory,
    fake_openai: FakeOpenAIServer,
    clock: FakeClock,
    alice: Scope,
) -> None:
    say(working_memory, clock, DM, alice, "Alice", "hi", "hello!")  # still in the window
    assert await summarizer.summarize(persona, DM) == []
    assert fake_openai.requests_for(SUMMARIZER) == []


async def test_a_long_archive_is_summarised_in_chunks_that_fit_the_context(
    summarizer: ConversationSummarizer,
    persona: Persona,
    working_memory: WorkingMemory,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    clock: FakeClock,
    app: App,
    alice: Scope,
) -> None:
    for n in range(30):
        say(working_memory, clock, DM, alice, "Alice", f"故事第{n}段：" + "今天发生了很多有趣的事情，" * 100, "go on!")
    working_memory.close_window(persona.id, DM)
    fake_openai.set_default(SUMMARIZER, "Alice told a long story.")

    episodes = await summarizer.summarize(persona, DM)

    settings = app.llm.settings("summarizer")
    requests = fake_openai.requests_for(SUMMARIZER)
    assert len(episodes) == len(requests) > 1
    for request in requests:
        prompt = sum(count_tokens(message["content"]) + MESSAGE_OVERHEAD_TOKENS for message in request.messages)
        assert prompt + settings.max_tokens <= settings.context_window
    assert sum(len(episode.message_ids) for episode in episodes) == 60
    assert working_memory.archived(persona.id, DM) == []


async def test_a_stretch_with_fewer_than_three_user_messages_gets_no_episode_and_loses_nothing(
    app: App,
    persona: Persona,
    working_memory: WorkingMemory,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    clock: FakeClock,
    alice: Scope,
) -> None:
    summarizer = ConversationSummarizer(app.llm, kb, working_memory)  # as the app makes it: three at least
    say(working_memory, clock, DM, alice, "Alice", "I'm off to Lisbon on Friday", "Have fun!")
    say(working_memory, clock, DM, alice, "Alice", "with my sister Mei", "Lovely!")
    working_memory.close_window(persona.id, DM)

    assert await summarizer.summarize(persona, DM) == []
    assert fake_openai.requests_for(SUMMARIZER) == [] and kb.count(alice) == 0
    assert working_memory.archived(persona.id, DM) == []  # not asked about again at every turn
    kept = [message.content for message in app.history.messages(alice)]
    assert "I'm off to Lisbon on Friday" in kept  # the week's chapter folds it from here


async def test_an_episode_keeps_decisions_promises_open_questions_people_places_and_feelings_within_its_size(
    app: App,
    persona: Persona,
    working_memory: WorkingMemory,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    clock: FakeClock,
    alice: Scope,
) -> None:
    summarizer = ConversationSummarizer(app.llm, kb, working_memory)
    say(working_memory, clock, DM, alice, "Alice", "我决定辞职了", "真的吗？")
    say(working_memory, clock, DM, alice, "Alice", "下个月和小美去杭州", "好呀")
    say(working_memory, clock, DM, alice, "Alice", "你答应提醒我买票哦", "一定！")
    working_memory.close_window(persona.id, DM)
    fake_openai.script(SUMMARIZER, "主人决定辞职，" * 200)  # a model that overruns the size it was asked for

    [episode] = await summarizer.summarize(persona, DM)

    [request] = fake_openai.requests_for(SUMMARIZER)
    system = request.messages[0]["content"]
    for kept in ("decided", "promised", "open", "people", "places", "felt", f"at most {EPISODE_TOKENS} tokens"):
        assert kept in system
    assert count_tokens(without_stamp(episode.content)) <= EPISODE_TOKENS + 1  # the ellipsis it was cut at
