"""Weeks of conversation in milliseconds: the memory lifecycle (docs/development/design-rules.md) end to end.

Every scenario goes through the product path: `companion.handle` and the consumed reply, the
background jobs (`tasks.drain`), the daily decay pass (`lifecycle.run_decay`) and the fake clock.
The models are the fake OpenAI server, scripted per role; the stores are real chromadb and SQLite.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
from typing import Any
from unittest.mock import ANY

import pytest

from bot.app import build_app
from bot.config import Settings
from core import phrasebook
from core.background.knowledge_monitor import NO_REPLY
from core.companion import Companion
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.records import MemoryChange, Scope
from knowledge.rules.decay import MemoryPolicy
from knowledge.rules.temporal import without_stamp
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeCut, FakeError, FakeOpenAIServer
from tests.fakes.scenario import (
    CHAT,
    MONITOR,
    REVIEWER,
    SO_FAR_HEADER,
    SUMMARIZER,
    Person,
    Timeline,
    boost,
    chat_history,
    memories_in,
    monitor_request,
    monitor_rules,
    prompt_sections,
    prompt_text,
    settle,
    system_message,
    turn_user_text,
    update,
    wait_until,
)

FAST_BACKOFF = (0.01, 0.01)

EPISODE_HEADER = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] ")


@pytest.fixture(autouse=True)
def quiet_background(fake_openai: FakeOpenAIServer) -> None:
    """Unless a scenario says otherwise the monitor has nothing to do and the summarizer writes a plain note."""
    fake_openai.set_default(MONITOR, "[SKIP]")
    fake_openai.set_default(SUMMARIZER, "主人和小祥闲聊了几句。")


def policy_of(companion: Companion) -> MemoryPolicy:
    """The numbers the default persona really runs with (docs/development/design-rules.md#decay plus its overrides)."""
    return MemoryPolicy().overridden(companion.persona().memory_rules)


def days_until_below(start: float, line: float, factor: float) -> int:
    """Decay days until `start * factor**n` first drops below `line`."""
    days = 0
    while start * factor**days >= line:
        days += 1
    return days


def facts(kb: ChromaKnowledgeBase, scope: Scope) -> dict[str, str]:
    """content -> id of the scope's facts and core memories."""
    return {record.content: record.id for record in kb.memories(scope, categories=["fact", "core"])}


async def no_trouble(companion: Companion, *scopes: Scope) -> None:
    """Once the background is quiet: nothing failed for good and nothing is left waiting."""
    await settle(companion)
    for scope in scopes:
        assert companion.journal.jobs.dead_letters(scope) == []
    assert companion.journal.jobs.pending_jobs() == []


# -- 1. a correction ---------------------------------------------------------------------------------


async def test_a_correction_replaces_the_old_fact_and_keeps_it_only_in_history(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default(
        MONITOR,
        monitor_rules(
            {
                "I live in Beijing": "[ADD] The user lives in Beijing",
                "moved from Beijing to Shanghai": update("Beijing", "The user lives in Shanghai"),
            }
        ),
    )
    me, days = Person(companion, clock), Timeline(companion, clock)

    await me.say("Hi! I live in Beijing, by the way.")
    await settle(companion)
    [beijing] = kb.memories(alice, categories=["fact"])
    assert (beijing.content, beijing.source) == ("The user lives in Beijing", "background_ai")

    await days.days(3)
    await me.say("Big news: I moved from Beijing to Shanghai last weekend!")
    await settle(companion)

    # the monitor could correct the memory because it was retrieved for the turn and shown to it
    assert memories_in(monitor_request(fake_openai, "moved from Beijing"))[beijing.id] == "The user lives in Beijing"
    [shanghai] = kb.memories(alice, categories=["fact"])
    assert (shanghai.id, shanghai.content) == (beijing.id, "The user lives in Shanghai")
    hits = kb.search(alice, "where do I live")
    assert hits[0].record.content == "The user lives in Shanghai"
    assert not [hit for hit in hits if "Beijing" in hit.record.content]
    history = [
        (h.memory_id, h.action, h.actor, h.old_content, h.new_content) for h in companion.journal.changes.changes(alice)
    ]
    assert history == [
        (beijing.id, "update", "background_ai", "The user lives in Beijing", "The user lives in Shanghai")
    ]

    await me.say("Where do I live now?")
    system = system_message(fake_openai.requests_for(CHAT)[-1])
    assert "The user lives in Shanghai" in system and "Beijing" not in system
    await no_trouble(companion, alice)


# -- 2. a change over time ---------------------------------------------------------------------------


async def test_a_change_over_time_keeps_both_states(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    # With the real embedder the two statements score ~0.96 memory to memory, below the monitor's
    # duplicate line (0.98), and the "restates" check would keep them apart as well.
    fake_openai.set_default(
        MONITOR,
        monitor_rules(
            {
                "好紧张": "[ADD] 主人对面试很紧张",
                "很放松": "[ADD] 主人现在对面试很放松",
            }
        ),
    )
    me, days = Person(companion, clock), Timeline(companion, clock)

    await me.say("明天要面试了，好紧张")
    await settle(companion)
    await days.days(10)
    await me.say("面试结束啦，我现在很放松")
    await settle(companion)

    nervous_id = facts(kb, alice)["主人对面试很紧张"]
    assert nervous_id in memories_in(monitor_request(fake_openai, "很放松"))  # the monitor saw the old state
    assert "change over time" in prompt_text(monitor_request(fake_openai, "很放松"))  # and was told how to judge it
    kept = {record.content: record for record in kb.memories(alice, categories=["fact"])}
    assert set(kept) == {"主人对面试很紧张", "主人现在对面试很放松"}
    policy = policy_of(companion)
    # ten days later the old state is fading (3 days past the grace period), not replaced or boosted
    assert kept["主人对面试很紧张"].importance == pytest.approx(
        policy.new_fact_importance * policy.fact_factor ** (10 - policy.grace_days)
    )
    assert kept["主人现在对面试很放松"].importance == policy.new_fact_importance
    assert companion.journal.changes.changes(alice) == []
    await no_trouble(companion, alice)


# -- 3. boosted to core by real use ---------------------------------------------------------------

MOCHI = "The user's cat is called Mochi"
CAT_MONITOR = {
    "my cat is called Mochi": f"[ADD] {MOCHI}\n[ADD] The user loves ramen",
    "I work as a nurse": "[ADD] The user works as a nurse",
    "Mochi": boost("Mochi"),
}
CAT_USES = [
    "Mochi knocked my cup over again",
    "Mochi slept on my keyboard all day",
    "I bought Mochi a new toy",
    "Mochi had a vet check-up today",
    "Mochi caught a moth last night",
    "Mochi learned to open the fridge",
    "Mochi is sulking because I was late",
]


async def _adopt_mochi(companion: Companion, kb: ChromaKnowledgeBase, me: Person, alice: Scope) -> str:
    await me.say("I have a cat, my cat is called Mochi. And I love ramen.")
    await me.say("I work as a nurse, long shifts this week.")
    await settle(companion)
    cat_id = facts(kb, alice)[MOCHI]
    [record] = kb.get(alice, [cat_id])
    assert record.importance == policy_of(companion).new_fact_importance == 1.0
    return cat_id


async def test_five_real_uses_bring_a_new_fact_to_its_promote_review(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default(MONITOR, monitor_rules(CAT_MONITOR))
    fake_openai.script(REVIEWER, "[PROMOTE]")
    me = Person(companion, clock)
    policy = policy_of(companion)
    cat_id = await _adopt_mochi(companion, kb, me, alice)
    uses = math.ceil(round((policy.promote_review_at - policy.new_fact_importance) / policy.boost, 9))
    assert uses == 5  # docs/development/design-rules.md#reviews: 1.0 + 5 × 0.3 reaches 2.5

    for text in CAT_USES[:uses]:
        await me.say(text)
        await settle(companion)
    [record] = kb.get(alice, [cat_id])
    assert record.importance == pytest.approx(policy.promote_review_at)
    assert len(fake_openai.requests_for(REVIEWER)) == 1
    assert record.category == "core"


async def test_a_fact_used_again_and_again_is_promoted_to_core_and_always_in_mind(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default(MONITOR, monitor_rules(CAT_MONITOR))
    fake_openai.script(REVIEWER, "A pet's name is a stable, long-term fact about 主人. [PROMOTE]")
    me, days = Person(companion, clock), Timeline(companion, clock)
    policy = policy_of(companion)
    cat_id = await _adopt_mochi(companion, kb, me, alice)

    # Each real use is a BOOST; the review comes once the threshold is reached, not before.
    for count, text in enumerate(CAT_USES, start=1):
        await days.days(2)  # within the grace period: no decay between uses
        await me.say(text)
        await settle(companion)
        [record] = kb.get(alice, [cat_id])
        if fake_openai.requests_for(REVIEWER):
            break
        assert record.category == "fact"
        assert record.importance == pytest.approx(policy.new_fact_importance + count * policy.boost)
    assert record.importance >= policy.promote_review_at - 1e-9

    [review] = fake_openai.requests_for(REVIEWER)
    under_review, related = prompt_text(review).split("<<<RELATED MEMORIES", 1)
    assert f"[{cat_id}] {MOCHI} (fact, importance {record.importance:.2f}" in under_review
    assert "The user loves ramen" in related and "The user works as a nurse" in related
    assert "Not core: temporary states" in prompt_text(review)
    assert record.category == "core"
    assert [(h.memory_id, h.action, h.actor) for h in companion.journal.changes.changes(alice)] == [
        (cat_id, "promote", "reviewer")
    ]
    before = fake_openai.requests_for(CHAT)[-1]  # while it was a fact it was only retrieved
    assert MOCHI in prompt_sections(before)[1] and MOCHI not in prompt_sections(before)[0]

    # From now on it is in every prompt, among the memories always injected, whatever the topic.
    promoted_at = len(fake_openai.requests_for(CHAT))
    for text in ["How's the weather today?", "Any idea for dinner?", "I'm so sleepy", "Tell me a joke"]:
        await days.days(2)
        await me.say(text)
        await settle(companion)
    later = fake_openai.requests_for(CHAT)[promoted_at:]
    assert len(later) == 4
    for request in later:
        core, retrieved = prompt_sections(request)
        assert MOCHI in core and MOCHI not in retrieved
    [promoted] = kb.get(alice, [cat_id])
    assert (promoted.category, promoted.importance) == ("core", record.importance)  # core never decays
    [ramen] = [r for r in kb.memories(alice, categories=["fact"]) if "ramen" in r.content]
    assert ramen.importance < policy.new_fact_importance  # while an unused fact of the same age did
    assert len(fake_openai.requests_for(REVIEWER)) == 1
    await no_trouble(companion, alice)


# -- 4. decay, KEEP, decay, delete ---------------------------------------------------------------


async def test_an_unused_fact_fades_is_kept_once_then_fades_away(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    policy = policy_of(companion)
    # 1.0 × 0.95^14 < 0.5: reviewed on day 7 + 14 = 21; 0.5 × 0.95^10 < 0.3: deleted 7 + 10 days after the KEEP.
    review_day = policy.grace_days + days_until_below(
        policy.new_fact_importance, policy.decay_review_below, policy.fact_factor
    )
    deletion_day = (
        review_day
        + policy.grace_days
        + days_until_below(policy.decay_keep_importance, policy.fact_delete_below, policy.fact_factor)
    )
    colour = "The user's favourite colour is green"
    fake_openai.set_default(MONITOR, monitor_rules({"favourite colour": f"[ADD] {colour}"}))
    fake_openai.script(REVIEWER, "Still true and harmless to keep. [KEEP]")
    me, days = Person(companion, clock), Timeline(companion, clock)

    await me.say("My favourite colour is green")
    await settle(companion)
    colour_id = facts(kb, alice)[colour]

    chats_on = {3, 10, 17, 30}  # small talk: the fact is retrieved and shown, but never used
    reviewed_on: list[int] = []
    kept, kept_at = None, None
    while days.day < deletion_day + 3 and kb.get(alice, [colour_id]):
        await days.next_day()
        if days.day in chats_on:
            await me.say("How's the weather today?")
            await settle(companion)
        if len(fake_openai.requests_for(REVIEWER)) > len(reviewed_on):
            reviewed_on.append(days.day)
            [kept], kept_at = kb.get(alice, [colour_id]), clock.now()
    gone_on = days.day

    assert reviewed_on == [review_day]
    assert kept is not None
    assert kept.importance == policy.decay_keep_importance and kept.decay_kept
    assert kept.last_access == kept_at
    assert gone_on == deletion_day
    assert len(fake_openai.requests_for(REVIEWER)) == 1  # the second fall is not reviewed again
    shown_unused = [r for r in fake_openai.requests_for(CHAT) if colour in system_message(r)]
    assert len(shown_unused) == len(chats_on & set(range(1, deletion_day)))
    history = [(h.action, h.actor) for h in companion.journal.changes.changes(alice, colour_id)]
    assert history == [("keep", "reviewer"), ("delete", "decay")]
    await no_trouble(companion, alice)


# -- 5. episodes ----------------------------------------------------------------------------------------


async def test_the_oldest_messages_become_an_episode_that_expires_after_two_weeks(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default(CHAT, lambda body: f"小祥: {body['messages'][-1]['content']}")
    fake_openai.script(SUMMARIZER, "主人说领养了一只叫Mochi的猫，小祥很开心。")
    me, days = Person(companion, clock), Timeline(companion, clock)
    window = companion.responses.working_memory.window_size
    assert window == 30
    started = clock.now()

    turns = window // 2 + 1  # 16 turns, 32 messages: two more than the window holds
    for n in range(1, turns + 1):
        await me.say(f"turn {n}: " + ("I adopted a cat named Mochi" if n == 1 else "chatting along"))
        clock.advance(minutes=1)
    await settle(companion)

    [episode] = kb.memories(alice, categories=["episode"])
    assert episode.content == f"[{started:%Y-%m-%d %H:%M}] 主人说领养了一只叫Mochi的猫，小祥很开心。"
    [summary_request] = fake_openai.requests_for(SUMMARIZER)
    transcript = prompt_text(summary_request)
    batch = companion.responses.working_memory.overflow_batch
    last_summarised = batch // 2  # the batch's messages are whole turns: user + reply
    assert "turn 1: I adopted a cat named Mochi" in transcript and "小祥: turn 1:" in transcript
    assert f"turn {last_summarised}:" in transcript and f"turn {last_summarised + 1}:" not in transcript

    await me.say("What did we talk about last time?")
    await settle(companion)
    prompt = fake_openai.requests_for(CHAT)[-1]
    assert len(chat_history(prompt)) == 2 * turns + 1 - batch
    assert not [text for text in chat_history(prompt) if text.endswith("turn 1: I adopted a cat named Mochi")]
    # the episode answers "last time", dated relative to now rather than by its stamp
    assert f"- [this evening] {without_stamp(episode.content)}" in system_message(prompt)
    assert "turn 1:" not in system_message(prompt)

    policy = policy_of(companion)
    await days.days(policy.episode_max_age_days - 1)
    [aging] = kb.get(alice, [episode.id])  # day 13: still there, fading
    assert aging.importance == pytest.approx(
        policy.episode_factor ** (policy.episode_max_age_days - 1 - policy.grace_days)
    )
    await days.next_day()
    assert kb.get(alice, [episode.id]) == []  # day 14: gone
    [(action, actor, detail)] = [
        (h.action, h.actor, h.detail) for h in companion.journal.changes.changes(alice, episode.id)
    ]
    assert (action, actor) == ("delete", "decay") and "14 days" in detail
    await no_trouble(companion, alice)


# -- 6. /new ---------------------------------------------------------------------------------------------


async def test_new_conversation_summarises_the_window_and_starts_fresh(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.script(SUMMARIZER, "主人和小祥聊了周末去爬山的计划。")
    me = Person(companion, clock)
    started = clock.now()
    said = ["Let's plan a hike this weekend", "Maybe the western hills?", "We should leave at seven"]
    for text in said:
        await me.say(text)
        clock.advance(minutes=2)

    greeting = await companion.new_conversation(None, "dm:cli:alice")
    assert greeting in companion.persona().greetings
    await settle(companion)

    [episode] = kb.memories(alice, categories=["episode"])
    assert episode.content == f"[{started:%Y-%m-%d %H:%M}] 主人和小祥聊了周末去爬山的计划。"
    transcript = prompt_text(fake_openai.requests_for(SUMMARIZER)[0])
    assert all(text in transcript for text in said)
    assert companion.responses.working_memory.window("xiaoxiang", "dm:cli:alice") == []

    await me.say("Good morning!")
    assert chat_history(fake_openai.requests_for(CHAT)[-1]) == ["Good morning!"]
    for text in ("Any news about the hike?", "I bought new boots"):
        await me.say(text)
    await companion.new_conversation(None, "dm:cli:alice")
    await settle(companion)
    # the new window becomes the second episode; nothing is summarised twice
    assert len(fake_openai.requests_for(SUMMARIZER)) == 2
    assert "Let's plan a hike" not in prompt_text(fake_openai.requests_for(SUMMARIZER)[1])
    await no_trouble(companion, alice)


# -- 7. idle timeout ---------------------------------------------------------------------------------------


async def test_a_quiet_conversation_is_closed_and_summarised(
    companion: Companion,
    kb: ChromaKnowledgeBase,
    clock: FakeClock,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    bob: Scope,
) -> None:
    fake_openai.script(SUMMARIZER, "主人说今天加班很累。")
    me = Person(companion, clock)
    him = Person(companion, clock, user_id=bob.user_id, speaker_name="Bob")
    timeout = companion.lifecycle.idle_timeout

    await me.say("Long day at work today")
    clock.advance(minutes=1)
    await me.say("The meeting ran until nine")
    clock.advance(minutes=1)
    await me.say("I'm exhausted")
    clock.advance(seconds=timeout.total_seconds())  # exactly the timeout since Alice's last message: not yet quiet
    assert await companion.lifecycle.summarize_idle() == 0
    await him.say("Hey, are you there?")  # Bob starts talking
    clock.advance(minutes=1)

    assert await companion.lifecycle.summarize_idle() == 1  # Alice's conversation only
    await settle(companion)
    [episode] = kb.memories(alice, categories=["episode"])
    assert episode.content.endswith("主人说今天加班很累。") and EPISODE_HEADER.match(episode.content)
    assert kb.memories(bob, categories=["episode"]) == []
    assert len(companion.responses.working_memory.window("xiaoxiang", "dm:cli:bob")) == 2
    assert await companion.lifecycle.summarize_idle() == 0  # closed once, not again

    await me.say("I'm back, slept well")
    assert chat_history(fake_openai.requests_for(CHAT)[-1]) == ["I'm back, slept well"]
    await no_trouble(companion, alice, bob)


# -- 8. explicit remember / forget -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("remember", "remembered", "others", "ask", "forget", "name"),
    [
        (
            "remember that my sister is called Lin",
            "my sister is called Lin",
            {"I love ramen": "The user loves ramen", "I work as a nurse": "The user works as a nurse"},
            "What's my sister called?",
            "forget my sister",
            "Lin",
        ),
        (
            "记住我妹妹叫林琳",
            "我妹妹叫林琳",
            {"我超爱吃拉面": "主人喜欢拉面", "我是护士": "主人是护士"},
            "我妹妹叫什么来着？",
            "忘掉我妹妹",
            "林琳",
        ),
    ],
    ids=["en", "zh"],
)
async def test_explicit_remember_and_forget_in_chat(
    companion: Companion,
    kb: ChromaKnowledgeBase,
    clock: FakeClock,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    remember: str,
    remembered: str,
    others: dict[str, str],
    ask: str,
    forget: str,
    name: str,
) -> None:
    fake_openai.set_default(MONITOR, monitor_rules({said: f"[ADD] {fact}" for said, fact in others.items()}))
    me, days = Person(companion, clock), Timeline(companion, clock)
    policy = policy_of(companion)

    await me.say(remember)
    for said in others:
        await me.say(said)
    await settle(companion)
    [sister] = [record for record in kb.memories(alice, categories=["fact"]) if record.content == remembered]
    assert (sister.source, sister.verified, sister.importance) == ("user", True, policy.verified_fact_importance)
    assert "Already done in code" in prompt_text(monitor_request(fake_openai, remember))
    assert set(facts(kb, alice)) == {remembered, *others.values()}

    await days.days(2)
    await me.say(ask)
    assert remembered in system_message(fake_openai.requests_for(CHAT)[-1])

    await me.say(forget)
    await settle(companion)
    assert set(facts(kb, alice)) == set(others.values())  # the sister is gone, nothing else is
    forget_prompt = prompt_text(monitor_request(fake_openai, forget))
    assert sister.id not in forget_prompt and "do not ADD it back" in forget_prompt
    history = [(h.memory_id, h.action, h.actor, h.old_content) for h in companion.journal.changes.changes(alice)]
    assert history == [(sister.id, "delete", "user", None)]  # that something was forgotten, never what

    await me.say("Who is in my family?")
    assert name not in system_message(fake_openai.requests_for(CHAT)[-1])
    await no_trouble(companion, alice)


# -- 9. restart with pending background work ------------------------------------------------------------


@pytest.mark.parametrize("stopped", ["before the job started", "while the monitor was thinking"])
async def test_background_work_left_at_shutdown_runs_exactly_once_after_a_restart(
    settings: Settings,
    clock: FakeClock,
    embedder: Embedder,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    stopped: str,
) -> None:
    flight = "The user's flight to Tokyo leaves at 9"
    fake_openai.set_default(MONITOR, monitor_rules({"flight to Tokyo": f"[ADD] {flight}"}))

    first = await build_app(settings, clock=clock, embedder=embedder, backoff=FAST_BACKOFF)
    await first.start(schedule=False)
    try:
        result = await first.companion.handle(Person(first.companion, clock).message("My flight to Tokyo leaves at 9"))
        if stopped == "before the job started":
            await first.companion.tasks.aclose(grace=0)  # shutting down while the reply still streams
            await result.text()
        else:
            fake_openai.set_delay(MONITOR, 0.3)
            await result.text()
            await wait_until(lambda: len(fake_openai.requests_for(MONITOR)) >= 1)
            await first.companion.tasks.aclose(grace=0)  # cancels the job in flight
            fake_openai.set_delay(MONITOR, 0.0)
        assert [(job.kind, job.scope) for job in first.journal.jobs.pending_jobs()] == [("monitor", alice)]
        assert first.companion.knowledge.memories(alice) == []
    finally:
        await first.aclose()
    asked_before_restart = len(fake_openai.requests_for(MONITOR))

    second = await build_app(settings, clock=clock, embedder=embedder, backoff=FAST_BACKOFF)
    try:
        await second.start(schedule=False)
        await second.companion.tasks.drain()
        assert len(fake_openai.requests_for(MONITOR)) == asked_before_restart + 1
        assert [record.content for record in second.companion.knowledge.memories(alice)] == [flight]
        await no_trouble(second.companion, alice)
    finally:
        await second.aclose()

    third = await build_app(settings, clock=clock, embedder=embedder, backoff=FAST_BACKOFF)
    try:
        assert third.journal.jobs.pending_jobs() == []
        await third.start(schedule=False)
        await third.companion.tasks.drain()
        assert len(fake_openai.requests_for(MONITOR)) == asked_before_restart + 1
        assert [record.content for record in third.companion.knowledge.memories(alice)] == [flight]
    finally:
        await third.aclose()


# -- 9b. every message reaches the monitor, reply or not ----------------------------------------------


@pytest.mark.parametrize(
    ("said", "fact"),
    [("remember that my locker code is LOCK-9913", "my locker code is LOCK-9913"), ("记住我喜欢拉面", "我喜欢拉面")],
)
@pytest.mark.parametrize("failure", ["the chat model failed", "the answer was empty", "the stream was cut", "died"])
async def test_what_the_user_says_reaches_the_monitor_whatever_becomes_of_the_reply(
    settings: Settings,
    clock: FakeClock,
    embedder: Embedder,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    said: str,
    fact: str,
    failure: str,
) -> None:
    answer = {
        "the chat model failed": FakeError(500, times=3),
        "the answer was empty": "   ",
        "the stream was cut": FakeCut("好的，我记", chunks=1),
        "died": "好的，记住啦",
    }[failure]
    fake_openai.script(CHAT, answer)
    first = await build_app(settings, clock=clock, embedder=embedder, backoff=FAST_BACKOFF)
    await first.start(schedule=False)
    try:
        result = await first.companion.handle(Person(first.companion, clock).message(said))
        if failure != "died":  # else the process dies while the reply streams: nobody reads it
            await result.text()
            assert not result.completed and result.stored is None
            await settle(first.companion)
    finally:
        await first.aclose()

    second = await build_app(settings, clock=clock, embedder=embedder, backoff=FAST_BACKOFF)
    try:
        await second.start(schedule=False)  # resumes the monitor job a dead process left held
        await settle(second.companion)
        [memory] = second.companion.knowledge.memories(alice)
        assert (memory.content, memory.verified, memory.source) == (fact, True, "user")
        [request] = fake_openai.requests_for(MONITOR)  # once, in one process or the other
        assert turn_user_text(request) == said and f"小祥: {NO_REPLY}" in prompt_text(request)
        await no_trouble(second.companion, alice)
    finally:
        await second.aclose()


# -- 10. scope isolation in the background ---------------------------------------------------------------


async def test_background_jobs_of_interleaved_users_never_see_each_others_memories(
    companion: Companion,
    kb: ChromaKnowledgeBase,
    clock: FakeClock,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    bob: Scope,
) -> None:
    alices_ramen: dict[str, str] = {}
    fake_openai.set_default(
        MONITOR,
        monitor_rules(
            {
                "I love tonkotsu ramen": "[ADD] Alice loves tonkotsu ramen",
                "I love miso ramen": "[ADD] Bob loves miso ramen",
                "my cat is called Mochi": "[ADD] Alice's cat is called Mochi",
                "my dog is called Rex": "[ADD] Bob's dog is called Rex",
                "Alice here": boost("ramen"),
                # Bob's monitor call names Alice's memory: an id of another scope must be refused.
                "Bob here": lambda body: f"{boost('ramen')(body)}\n[DELETE:{alices_ramen['id']}]",
            }
        ),
    )
    her = Person(companion, clock, user_id=alice.user_id, speaker_name="Alice")
    him = Person(companion, clock, user_id=bob.user_id, speaker_name="Bob")

    # Turns of both users interleave, and their background jobs run side by side.
    await her.say("I love tonkotsu ramen")
    await him.say("I love miso ramen")
    await her.say("And my cat is called Mochi")
    await him.say("And my dog is called Rex")
    await settle(companion)
    alices_ramen["id"] = facts(kb, alice)["Alice loves tonkotsu ramen"]

    group = "discord:channel:42"
    her.conversation_id = him.conversation_id = group
    # both let groups hear what they told in private: only the scope filter may keep them apart now
    await companion.share(alice, "on")
    await companion.share(bob, "on")
    await her.say("Alice here: which ramen do I love, and how is my pet?", group=True)
    await him.say("Bob here: which ramen do I love, and how is my pet?", group=True)
    await settle(companion)

    alice_ids, bob_ids = set(facts(kb, alice).values()), set(facts(kb, bob).values())
    assert len(alice_ids) == len(bob_ids) == 2
    seen = {"Alice": 0, "Bob": 0}
    for request in fake_openai.requests_for(MONITOR):
        said, shown = turn_user_text(request), set(memories_in(request))
        owner, others, other_name = (
            ("Bob", alice_ids, "Alice")
            if "Bob here" in said or "miso" in said or "Rex" in said
            else ("Alice", bob_ids, "Bob")
        )
        seen[owner] += 1
        assert not shown & others, (owner, said)
        memory_block = prompt_text(request).split("<<<MEMORIES", 1)[1].split("MEMORIES>>>", 1)[0]
        assert other_name not in memory_block, (owner, said)
    assert seen == {"Alice": 3, "Bob": 3}
    # each ramen memory was really shown to its owner: the scope filter, not an empty store, kept them apart
    bobs_ramen_id = facts(kb, bob)["Bob loves miso ramen"]
    assert alices_ramen["id"] in memories_in(monitor_request(fake_openai, "Alice here"))
    assert bobs_ramen_id in memories_in(monitor_request(fake_openai, "Bob here"))

    assert facts(kb, alice) == {"Alice loves tonkotsu ramen": alices_ramen["id"], "Alice's cat is called Mochi": ANY}
    [alice_ramen] = kb.get(alice, [alices_ramen["id"]])
    [bob_ramen] = kb.get(bob, [bobs_ramen_id])
    once = policy_of(companion).new_fact_importance + policy_of(companion).boost
    assert alice_ramen.importance == bob_ramen.importance == pytest.approx(once)  # each boosted once, by its owner
    assert companion.journal.changes.changes(alice) == []
    for request in fake_openai.requests_for(CHAT):  # and the replies never saw the other user's memories
        alices_turn = any(key in chat_history(request)[-1] for key in ("tonkotsu", "Mochi", "Alice here"))
        other = ("Bob loves", "Bob's dog") if alices_turn else ("Alice loves", "Alice's cat")
        assert not [text for text in other if text in system_message(request)]
    await no_trouble(companion, alice, bob)


# -- 11. the reply never waits for the monitor ---------------------------------------------------------


async def test_replies_are_delivered_while_the_monitor_is_still_thinking(
    settings: Settings, clock: FakeClock, embedder: Embedder, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    # The monitor is held at a gate until the test opens it: no timing assumptions. A patient client
    # timeout keeps the held request from being retried meanwhile.
    patient = settings.changed(llm={"timeout": 30.0})
    app = await build_app(patient, clock=clock, embedder=embedder, backoff=FAST_BACKOFF)
    gate = threading.Event()
    events: list[str] = []

    def held_monitor(body: dict[str, Any]) -> str:
        events.append("monitor asked")
        gate.wait(timeout=20)
        events.append("monitor answered")
        return "[ADD] The user is learning the guitar"

    fake_openai.script(MONITOR, held_monitor)
    me = Person(app.companion, clock)
    try:
        first = await app.companion.handle(me.message("I started learning the guitar"))
        await asyncio.wait_for(first.text(), timeout=10)
        events.append("first reply delivered")
        assert [job.kind for job in app.journal.jobs.pending_jobs()] == ["monitor"]

        await wait_until(lambda: "monitor asked" in events)
        second = await app.companion.handle(me.message("What should I practise first?"))
        await asyncio.wait_for(second.text(), timeout=10)
        events.append("second reply delivered")
        assert "monitor answered" not in events
        assert [job.kind for job in app.journal.jobs.pending_jobs()] == ["monitor", "monitor"]
    finally:
        gate.set()
    try:
        await app.companion.tasks.drain()
        assert events == ["first reply delivered", "monitor asked", "second reply delivered", "monitor answered"]
        assert [r.content for r in app.companion.knowledge.memories(alice)] == ["The user is learning the guitar"]
        await no_trouble(app.companion, alice)
    finally:
        await app.aclose()


# -- 12. memory without a background model (the embedded demo) -------------------------------------------


async def test_explicit_memory_mode_keeps_what_was_asked_and_never_calls_a_background_model(
    settings: Settings, clock: FakeClock, embedder: Embedder, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    app = await build_app(settings.changed(memory={"mode": "explicit"}), clock=clock, embedder=embedder)
    companion, kb = app.companion, app.companion.knowledge
    me, days = Person(companion, clock), Timeline(companion, clock)
    try:
        await me.say("remember that my locker code is LOCK-9913")
        await me.say("记住我喜欢拉面")
        await me.say("I had a long day at the bank")
        await settle(companion)
        assert set(facts(kb, alice)) == {"my locker code is LOCK-9913", "我喜欢拉面"}
        assert all(record.verified for record in kb.memories(alice, categories=["fact"]))

        await companion.new_conversation(None, "dm:cli:alice")
        await settle(companion)
        [episode] = kb.memories(alice, categories=["episode"])
        assert EPISODE_HEADER.sub("", episode.content) == (
            "主人 said: remember that my locker code is LOCK-9913 / 记住我喜欢拉面 / I had a long day at the bank"
        )

        await me.say("forget my locker code")
        await settle(companion)
        assert set(facts(kb, alice)) == {"我喜欢拉面"}
        ramen = facts(kb, alice)["我喜欢拉面"]
        policy = policy_of(companion)
        fading = days_until_below(policy.verified_fact_importance, policy.decay_review_below, policy.fact_factor)
        await days.days(policy.grace_days + fading)  # below the review line: kept without a model, the safe choice
        assert kb.get(alice, [ramen])[0].importance == policy.decay_keep_importance

        assert {request.model for request in fake_openai.requests} == {
            CHAT
        }  # not one monitor, summarizer or reviewer call
        await no_trouble(companion, alice)
    finally:
        await app.aclose()


# -- 13. discretion: what was said in private stays out of groups ----------------------------------------

GROUP_A, GROUP_B = "telegram:chat:-1001", "telegram:chat:-2002"
SECRETS = ("ZQX-4471", "7781", "3 May")  # a fact, a past message and a core memory, all told in private


async def test_what_alice_told_in_private_never_reaches_a_group_prompt_unless_she_shares_it(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default(
        MONITOR,
        monitor_rules(
            {
                "my passport number is": "[ADD] Alice's passport number is ZQX-4471",
                "my birthday is on": "[ADD] Alice's birthday is on 3 May",
            }
        ),
    )
    in_private = Person(companion, clock, user_id=alice.user_id)
    in_group = Person(companion, clock, user_id=alice.user_id, conversation_id=GROUP_A)
    await in_private.say("my passport number is ZQX-4471")
    await in_private.say("my birthday is on 3 May")
    await in_private.say("my diary code is 7781, don't tell anyone")  # only a message: no memory is made of it
    await settle(companion)
    passport, birthday = (
        facts(kb, alice)["Alice's passport number is ZQX-4471"],
        facts(kb, alice)["Alice's birthday is on 3 May"],
    )
    kb.update(
        alice, birthday, MemoryChange(category="core")
    )  # as a promote review would: core memories are always in mind
    assert [record.learned_in for record in kb.memories(alice)] == [None, None]
    question = "what are my passport number, my diary code and my birthday?"

    async def asked_in_the_group() -> tuple[str, str]:
        """The chat prompt of the group turn, and what its monitor was shown."""
        await in_group.say(question, group=True)
        await settle(companion)
        return prompt_text(fake_openai.requests_for(CHAT)[-1]), prompt_text(fake_openai.requests_for(MONITOR)[-1])

    chat, monitor = await asked_in_the_group()
    assert [secret for secret in SECRETS if secret in chat or secret in monitor] == []
    assert turn_user_text(fake_openai.requests_for(MONITOR)[-1]) == question

    await in_private.say(question)  # in private all three are there to be found
    assert [secret for secret in SECRETS if secret in prompt_text(fake_openai.requests_for(CHAT)[-1])] == list(SECRETS)

    assert await companion.share(alice, passport) == phrasebook.memory_sharing(kb.get(alice, [passport])[0], True)
    chat, monitor = await asked_in_the_group()
    assert [secret for secret in SECRETS if secret in chat] == ["ZQX-4471"]
    assert set(memories_in(fake_openai.requests_for(MONITOR)[-1])) == {passport}

    assert await companion.share(alice, "on") == phrasebook.sharing_switched(True)
    chat, _ = await asked_in_the_group()
    assert [secret for secret in SECRETS if secret in chat] == list(SECRETS)
    assert (
        "7781" in system_message(fake_openai.requests_for(CHAT)[-1]).split("## Earlier messages that may matter now")[1]
    )

    assert await companion.share(alice, "off") == phrasebook.sharing_switched(False)
    chat, _ = await asked_in_the_group()
    assert [secret for secret in SECRETS if secret in chat] == ["ZQX-4471"]  # shared on its own, it stays shared
    await no_trouble(companion, alice)


async def test_a_fact_learned_in_one_group_is_used_there_and_in_private_but_not_in_another_group(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default(MONITOR, monitor_rules({"I sing in a choir": "[ADD] Alice sings in a choir"}))
    in_a = Person(companion, clock, user_id=alice.user_id, conversation_id=GROUP_A)
    in_b = Person(companion, clock, user_id=alice.user_id, conversation_id=GROUP_B)
    in_private = Person(companion, clock, user_id=alice.user_id)
    await in_a.say("I sing in a choir every Thursday", group=True)
    await settle(companion)
    [choir] = kb.memories(alice)
    assert (choir.content, choir.learned_in, choir.shared) == ("Alice sings in a choir", GROUP_A, False)

    for person, group, heard in ((in_a, True, True), (in_b, True, False), (in_private, False, True)):
        await person.say("what do I do on Thursdays?", group=group)
        await settle(companion)
        assert ("choir" in prompt_text(fake_openai.requests_for(CHAT)[-1])) is heard, person.conversation_id
        assert (choir.id in memories_in(fake_openai.requests_for(MONITOR)[-1])) is heard, person.conversation_id

    # told again in group B, it becomes known there too: a memory of its own, not a boost of group A's
    await in_b.say("I sing in a choir, did you know?", group=True)
    await settle(companion)
    by_origin = {record.learned_in: record for record in kb.memories(alice)}
    assert set(by_origin) == {GROUP_A, GROUP_B}
    assert by_origin[GROUP_A] == kb.get(alice, [choir.id])[0] and by_origin[GROUP_A].hits == 0
    await no_trouble(companion, alice)


async def test_the_monitor_and_the_summarizer_record_where_each_memory_was_learned(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default(
        MONITOR,
        monitor_rules(
            {
                "actually I moved": update("Lyon", "Alice lives in Paris"),  # the first rule that matches wins
                "I moved to": "[ADD] Alice lives in Lyon",
                "I work at": "[ADD] Alice works at a bakery",
            }
        ),
    )
    in_private = Person(companion, clock, user_id=alice.user_id)
    in_group = Person(companion, clock, user_id=alice.user_id, conversation_id=GROUP_A)
    await in_private.say("I moved to Lyon last year")
    await in_private.say("the flat is small")  # enough for an episode of its own
    await in_private.say("but I love the market")
    await in_group.say("I work at a bakery now", group=True)
    await in_group.say("remember that my locker code is 9913", group=True)  # done in code, not by the model
    await settle(companion)
    learned = {record.content: record.learned_in for record in kb.memories(alice)}
    assert learned == {
        "Alice lives in Lyon": None,
        "Alice works at a bakery": GROUP_A,
        "my locker code is 9913": GROUP_A,
    }

    # a private fact she shared, corrected in a group, is still a private fact she shared
    lyon = facts(kb, alice)["Alice lives in Lyon"]
    await companion.share(alice, lyon)
    await in_group.say("actually I moved to Paris in May", group=True)
    await settle(companion)
    [paris] = kb.get(alice, [lyon])
    assert (paris.content, paris.learned_in, paris.shared) == ("Alice lives in Paris", None, True)

    await companion.new_conversation(None, GROUP_A)
    await companion.new_conversation(None, in_private.message("").conversation_id)
    await settle(companion)
    episodes = {record.learned_in for record in kb.memories(alice, categories=["episode"])}
    assert episodes == {None, GROUP_A}  # an episode is as private as the conversation it sums up
    await no_trouble(companion, alice)


# -- 5b. the conversation so far ------------------------------------------------------------------------


def so_far_section(system: str) -> str:
    """The prompt's summary of the conversation's start (empty when it has none)."""
    if SO_FAR_HEADER not in system:
        return ""
    return system.split(SO_FAR_HEADER, 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize(
    ("opening", "summary", "chatter"),
    [
        ("I got the job at the bakery!", "Alice said she got the job at the bakery; Xiaoxiang cheered.", "and then"),
        ("我拿到面包店的工作了！", "主人说拿到了面包店的工作，小祥为她欢呼。", "然后呢"),
    ],
    ids=["en", "zh"],
)
@pytest.mark.parametrize("ending", ["pause", "new"])
async def test_the_summary_of_tonights_start_stays_in_the_prompt_until_the_conversation_ends(
    companion: Companion,
    kb: ChromaKnowledgeBase,
    clock: FakeClock,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    opening: str,
    summary: str,
    chatter: str,
    ending: str,
) -> None:
    fake_openai.set_default(CHAT, "嗯嗯")
    fake_openai.script(SUMMARIZER, summary)
    me = Person(companion, clock)
    window = companion.responses.working_memory.window_size
    await me.say(opening)
    for n in range(window):  # 62 messages: the opening left the window long ago
        clock.advance(minutes=1)
        await me.say(f"{chatter} {n}")
        await settle(companion)
    [first, *_] = sorted(kb.memories(alice, categories=["episode"]), key=lambda record: record.about or clock.now())
    assert first.content.endswith(summary)

    await me.say(f"{chatter} again")
    system = system_message(fake_openai.requests_for(CHAT)[-1])
    assert not [text for text in chat_history(fake_openai.requests_for(CHAT)[-1]) if opening in text]
    assert summary in so_far_section(system)  # the start of tonight, through its summary
    assert system.count(summary) == 1  # shown once, not again among the memories retrieved

    # the conversation ends (a pause, or /new): the next one starts without tonight's summary in view
    if ending == "pause":
        clock.advance(seconds=companion.lifecycle.idle_timeout.total_seconds() + 60)
        assert await companion.lifecycle.summarize_idle() == 1
    else:
        await companion.new_conversation(None, "dm:cli:alice")
    await settle(companion)
    clock.advance(minutes=1)
    await me.say("good morning")
    assert so_far_section(system_message(fake_openai.requests_for(CHAT)[-1])) == ""
    await no_trouble(companion, alice)


async def test_a_private_conversations_summary_stays_out_of_the_group_prompt(
    companion: Companion, clock: FakeClock, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    fake_openai.set_default(CHAT, "嗯嗯")
    fake_openai.set_default(
        SUMMARIZER,
        lambda body: (
            "Alice told Xiaoxiang about her secret diagnosis."
            if "private talk" in body["messages"][-1]["content"]
            else "The friends chatted in the group."
        ),
    )
    me = Person(companion, clock)
    for n in range(companion.responses.working_memory.window_size):
        await me.say(f"private talk {n}")
        clock.advance(minutes=1)
        await settle(companion)
    await me.say("still here")
    assert "secret diagnosis" in so_far_section(system_message(fake_openai.requests_for(CHAT)[-1]))

    in_group = Person(companion, clock, conversation_id="group:cli:friends")
    for n in range(companion.responses.working_memory.window_size):
        await in_group.say(f"group talk {n}", group=True)
        clock.advance(minutes=1)
        await settle(companion)
    await in_group.say("anyone?", group=True)
    group_system = system_message(fake_openai.requests_for(CHAT)[-1])
    assert "secret diagnosis" not in group_system
    assert "The friends chatted in the group." in so_far_section(group_system)  # the group's own summary
