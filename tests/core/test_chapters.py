"""Chapters end to end on a fake clock: weeks folded before their episodes expire, months from weeks, catch-up
after downtime, one model call per window, a time named bringing its chapters, forgets reaching them, and
discretion, in EN and ZH, on SQLite and on PostgreSQL with a Chroma server.

The rules: docs/concepts/memory.md#chapters.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from bot.app import App
from core.companion import Companion
from knowledge.forget.privacy_scan import scan_directory
from knowledge.records import MemoryRecord, Scope
from knowledge.rules.chapters import chapter_label
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT, MONITOR, SUMMARIZER, Body, Person, prompt_text, system_message

ALICE = Scope("xiaoxiang", "cli:alice")
GROUP = "discord:channel:42"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2027, 1, 4, 10, tzinfo=UTC))  # a Monday


def notes_of(body: Body) -> list[str]:
    """What a chapter prompt folds, one line each."""
    return prompt_text(body).split("<<<NOTES\n", 1)[1].split("\nNOTES>>>", 1)[0].splitlines()


def summarizer(body: Body) -> str:
    """Episodes sum a conversation up by its first line; chapters join what they fold (without its dates)."""
    text = prompt_text(body)
    if "<<<NOTES" in text:
        return "Chapter: " + " | ".join(line.split("] ", 1)[1] for line in notes_of(body))
    transcript = text.split("<<<CONVERSATION\n", 1)[1]
    return "Talked: " + transcript.splitlines()[0].split(": ", 1)[1]


@pytest.fixture(autouse=True)
def models(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_default(CHAT, "嗯嗯")
    fake_openai.set_default(MONITOR, "[SKIP]")
    fake_openai.set_default(SUMMARIZER, summarizer)


def chapter_calls(fake_openai: FakeOpenAIServer) -> list[list[str]]:
    """What each chapter the summarizer was asked for folded."""
    return [
        notes_of(request.body) for request in fake_openai.requests_for(SUMMARIZER) if "<<<NOTES" in str(request.body)
    ]


def chapters(companion: Companion, scope: Scope = ALICE) -> dict[str, MemoryRecord]:
    found = companion.knowledge.memories(scope, categories=["chapter"])
    return {chapter_label(record, UTC): record for record in found}


def move_to(clock: FakeClock, moment: datetime) -> None:
    clock.advance(seconds=(moment - clock.now()).total_seconds())


async def conversation(companion: Companion, clock: FakeClock, *lines: str, group: bool = False) -> None:
    """Alice says `lines` a minute apart, then the conversation closes (an episode is written)."""
    alice = Person(companion, clock, conversation_id=GROUP if group else None)
    for line in lines:
        await alice.say(line, group=group)
        clock.advance(minutes=1)
    await companion.new_conversation(None, GROUP if group else f"dm:{ALICE.user_id}")
    await companion.tasks.drain()


async def daily_pass(companion: Companion) -> None:
    """The daily pass as the scheduler runs it: chapters due submitted, decay, then the jobs."""
    await companion.lifecycle.run_decay()
    await companion.tasks.drain()


async def test_a_week_folds_into_a_chapter_once_then_its_month_from_the_weeks(
    any_app: App, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    companion = any_app.companion
    await conversation(companion, clock, "我下周要搬家到杭州", "妈妈会来帮我", "有点舍不得北京")
    [episode] = companion.knowledge.memories(ALICE, categories=["episode"])

    move_to(clock, datetime(2027, 1, 8, 23, tzinfo=UTC))  # the week is over, but not for a day yet
    await daily_pass(companion)
    assert chapters(companion) == {}

    move_to(clock, datetime(2027, 1, 9, 4, tzinfo=UTC))
    await daily_pass(companion)
    await daily_pass(companion)  # a second pass (another process, a restart) asks no model again
    [week] = chapters(companion).values()
    assert chapter_label(week, UTC) == "1–7 January 2027"
    assert week.content == "Chapter: Talked: 我下周要搬家到杭州"
    assert episode.id in week.message_ids  # it records what it folds
    assert len(chapter_calls(fake_openai)) == 1

    move_to(clock, datetime(2027, 2, 2, 4, tzinfo=UTC))
    await daily_pass(companion)
    assert companion.knowledge.memories(ALICE, categories=["episode"]) == []  # expired at 14 days; its story stays
    found = chapters(companion)
    assert set(found) == {"1–7 January 2027", "January 2027"}
    assert found["January 2027"].message_ids == (week.id,)
    assert chapter_calls(fake_openai)[-1] == ["[1–7 January 2027] Chapter: Talked: 我下周要搬家到杭州"]
    assert len(chapter_calls(fake_openai)) == 2

    await Person(companion, clock).say("我们一月都聊了什么？")
    prompt = system_message(fake_openai.requests_for(CHAT)[-1])
    assert "- [January 2027] Chapter: Chapter: Talked: 我下周要搬家到杭州" in prompt
    assert "- [1–7 January 2027] Chapter: Talked: 我下周要搬家到杭州" in prompt


async def test_after_downtime_missed_weeks_are_folded_from_their_messages_one_call_each(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    companion = app.companion
    await conversation(companion, clock, "I adopted a cat called Mochi", "she hides under the sofa", "I love her")
    clock.advance(days=7)
    await conversation(companion, clock, "I start the new job at Acme on Monday")  # too short to matter alone

    move_to(clock, datetime(2027, 3, 3, 4, tzinfo=UTC))  # down since January: every episode has expired
    await daily_pass(companion)

    found = chapters(companion)
    assert set(found) == {"1–7 January 2027", "8–14 January 2027", "January 2027"}
    assert "Mochi" in found["1–7 January 2027"].content  # folded from what was said, the episode gone
    assert "Acme" in found["8–14 January 2027"].content
    assert "Mochi" in found["January 2027"].content and "Acme" in found["January 2027"].content
    assert len(chapter_calls(fake_openai)) == 3  # one per window, however long the downtime

    await Person(companion, clock).say("What did we talk about in January?")
    prompt = system_message(fake_openai.requests_for(CHAT)[-1])
    assert "- [January 2027] Chapter:" in prompt and "Mochi" in prompt


async def test_a_forget_deletes_the_chapters_made_from_it_at_once_and_the_week_is_written_again_without_it(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    companion = app.companion
    await conversation(companion, clock, "my locker code is 4471-9913", "it is at the gym", "don't tell anyone")
    await conversation(companion, clock, "I went hiking at Xiangshan", "the leaves were red", "so tired now")
    move_to(clock, datetime(2027, 2, 2, 4, tzinfo=UTC))
    await daily_pass(companion)
    assert set(chapters(companion)) == {"1–7 January 2027", "January 2027"}
    assert "4471-9913" in chapters(companion)["January 2027"].content

    plan = await companion.forgetting.find(ALICE, "my locker code 4471-9913")
    await companion.forgetting.forget(plan)
    assert chapters(companion) == {}  # the week and the month it folded into, before the forget answers
    app.companion.knowledge.compact()
    report = await asyncio.to_thread(scan_directory, app.settings.storage.data_dir, "4471-9913")
    assert report.in_files == {} and report.in_rows == {}, (report.in_files, report.in_rows)

    await daily_pass(companion)  # rewritten from what is left
    found = chapters(companion)
    assert set(found) == {"1–7 January 2027", "January 2027"}
    assert "Xiangshan" in found["January 2027"].content and "4471" not in found["January 2027"].content


async def test_a_chapter_rewritten_in_other_words_still_goes_with_what_it_was_made_from(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    companion = app.companion
    await conversation(companion, clock, "我的储物柜密码是 4471-9913", "在健身房", "别告诉别人")
    fake_openai.set_default(
        SUMMARIZER, lambda body: "主人说了健身房柜子的事。" if "<<<NOTES" in prompt_text(body) else summarizer(body)
    )
    move_to(clock, datetime(2027, 1, 9, 4, tzinfo=UTC))
    await daily_pass(companion)
    [week] = chapters(companion).values()
    assert "4471" not in week.content  # the model's words: no text match can find it

    await Person(companion, clock).say("忘掉我的储物柜密码 4471-9913")  # typed in chat
    await companion.tasks.drain()
    assert chapters(companion) == {}
    app.companion.knowledge.compact()
    report = await asyncio.to_thread(scan_directory, app.settings.storage.data_dir, "健身房柜子")
    assert report.in_files == {} and report.in_rows == {}, (report.in_files, report.in_rows)


async def test_a_chapter_with_anything_private_stays_out_of_group_prompts(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    companion = app.companion
    await conversation(companion, clock, "we should all play Catan on Friday", "I'll bring snacks", "7pm?", group=True)
    clock.advance(days=7)
    await conversation(companion, clock, "we could try Catan again", "Ben owes me a rematch", "ok", group=True)
    await conversation(companion, clock, "my therapist says I'm doing better", "I cried a bit", "thanks")
    move_to(clock, datetime(2027, 1, 16, 4, tzinfo=UTC))
    await daily_pass(companion)
    found = chapters(companion)
    assert found["1–7 January 2027"].learned_in == GROUP  # only said in the group: as public as the group
    assert found["8–14 January 2027"].learned_in is None  # anything said in private makes it private

    in_group = Person(companion, clock, conversation_id=GROUP)
    await in_group.say("what did we do in January?", group=True)
    prompt = system_message(fake_openai.requests_for(CHAT)[-1])
    assert "- [1–7 January 2027]" in prompt
    assert "therapist" not in prompt and "8–14 January 2027" not in prompt

    await Person(companion, clock).say("what did we do in January?")  # in private, everything
    prompt = system_message(fake_openai.requests_for(CHAT)[-1])
    assert "- [8–14 January 2027]" in prompt and "therapist" in prompt


async def test_chapters_obey_the_users_time_zone(app: App, clock: FakeClock) -> None:
    companion = app.companion
    await companion.time_zone(ALICE, "Asia/Shanghai")
    move_to(clock, datetime(2027, 1, 7, 17, tzinfo=UTC))  # 8 January, 01:00 in Shanghai: the second week
    await conversation(companion, clock, "刚下班", "好累", "晚安")
    move_to(clock, datetime(2027, 1, 16, 4, tzinfo=UTC))
    await daily_pass(companion)
    [week] = companion.knowledge.memories(ALICE, categories=["chapter"])
    assert week.about == datetime(2027, 1, 7, 16, tzinfo=UTC)  # midnight in Shanghai
    assert week.until is not None and week.until - week.about == timedelta(days=7)
