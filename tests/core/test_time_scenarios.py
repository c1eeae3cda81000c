"""A companion that lives in time, end to end on a fake clock, in two time zones, in EN and ZH.

The rules: docs/development/design-rules.md#time.

Every scenario goes through the product path: `/timezone`, `companion.handle` and the consumed reply,
`/new`, the background jobs, the fake clock. The models are the fake OpenAI server, scripted by what
the user said; the stores are real chromadb and SQLite.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from bot.app import App
from bot.config import Settings
from core.companion import Companion
from knowledge.memory.chroma_store import ChromaKnowledgeBase
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
    prompt_sections,
    prompt_text,
    settle,
    system_message,
)

ZONES = ["Asia/Shanghai", "America/New_York"]
QUOTED_HEADER = "## Earlier messages that may matter now"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Every conversation of these scenarios is one or two messages, each about a time of its own: each
    becomes an episode (the minimum an episode needs has its tests with the summarizer and the chapters)."""
    return settings.changed(memory={"episode_min_user_messages": 1})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 10, 20, tzinfo=UTC))


def summary_of_first_message(body: Body) -> str:
    """A summarizer that sums a conversation up by its first line, so each episode says what it was about."""
    transcript = prompt_text(body).split("<<<CONVERSATION\n", 1)[1]
    return "Talked about this: " + transcript.splitlines()[0].split(": ", 1)[1]


@pytest.fixture(autouse=True)
def background(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_default(CHAT, "嗯嗯")
    fake_openai.set_default(MONITOR, "[SKIP]")
    fake_openai.set_default(SUMMARIZER, summary_of_first_message)


async def living_in(companion: Companion, clock: FakeClock, zone: str) -> Person:
    """Alice, who has told the companion where she lives with `/timezone`."""
    me = Person(companion, clock)
    await companion.time_zone(Scope("xiaoxiang", me.user_id), zone)
    return me


def move_to(clock: FakeClock, moment: datetime) -> None:
    """The fake clock moved forward to `moment` (aware, any zone)."""
    assert moment >= clock.now(), "time only moves forward"
    clock.advance(seconds=(moment - clock.now()).total_seconds())


def chat_prompts(fake_openai: FakeOpenAIServer) -> list[str]:
    return [system_message(request) for request in fake_openai.requests_for(CHAT)]


def retrieved(fake_openai: FakeOpenAIServer) -> str:
    """The memories the last chat prompt retrieved for its message (not the past messages it quotes)."""
    return prompt_sections(fake_openai.requests_for(CHAT)[-1])[1].split(QUOTED_HEADER)[0]


def quoted(fake_openai: FakeOpenAIServer) -> list[str]:
    """The past messages the last chat prompt quotes, best first."""
    section = prompt_sections(fake_openai.requests_for(CHAT)[-1])[1].partition(QUOTED_HEADER)[2]
    return [line for line in section.splitlines() if line.startswith("- [")]


async def close_conversation(companion: Companion, me: Person) -> None:
    """`/new`: the conversation so far becomes an episode."""
    await companion.new_conversation(None, me.message("").conversation_id)
    await settle(companion)


# -- now -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "saturday_2359", "first_0130", "day"),
    [
        # Berlin's clocks go back at 01:00 UTC on 25 October: 02:00-03:00 happens twice
        ("Europe/Berlin", datetime(2026, 10, 24, 21, 59, tzinfo=UTC), datetime(2026, 10, 25, 0, 30, tzinfo=UTC), 24),
        # New York's at 06:00 UTC on 1 November: 01:00-02:00 happens twice
        ("America/New_York", datetime(2026, 11, 1, 3, 59, tzinfo=UTC), datetime(2026, 11, 1, 5, 30, tzinfo=UTC), 31),
    ],
)
async def test_the_prompts_now_is_the_users_around_midnight_and_across_a_daylight_saving_change(
    companion: Companion,
    clock: FakeClock,
    fake_openai: FakeOpenAIServer,
    zone: str,
    saturday_2359: datetime,
    first_0130: datetime,
    day: int,
) -> None:
    me = await living_in(companion, clock, zone)
    month = saturday_2359.astimezone(ZoneInfo(zone)).strftime("%B")
    twice = "02:30" if zone == "Europe/Berlin" else "01:30"
    for moment in (saturday_2359, saturday_2359 + timedelta(minutes=2), first_0130):
        move_to(clock, moment)
        await me.say("hi")
    move_to(clock, first_0130 + timedelta(hours=1))  # an hour later, the same wall time
    await me.say("still awake")
    prompts = chat_prompts(fake_openai)
    assert f"## Now\nSaturday {day} {month} 2026, 23:59 (night) where 主人 is." in prompts[0]
    assert "This is the first time 主人 writes to you." in prompts[0]
    sunday = "Sunday 25 October" if zone == "Europe/Berlin" else "Sunday 1 November"
    assert f"## Now\n{sunday} 2026, 00:01 (night) where 主人 is.\n" in prompts[1]  # a new day, two minutes on
    assert f"## Now\n{sunday} 2026, {twice} (night) where 主人 is." in prompts[2]
    assert f"## Now\n{sunday} 2026, {twice} (night) where 主人 is.\n" in prompts[3]  # an hour later
    assert "previous message" not in prompts[3]  # an hour of silence is not worth a line


async def test_a_long_silence_and_a_new_conversation_are_said(
    companion: Companion, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    me = await living_in(companion, clock, "Asia/Shanghai")
    await me.say("good night")
    clock.advance(hours=9)
    await me.say("good morning")
    await close_conversation(companion, me)
    clock.advance(days=3)
    await me.say("I'm back")
    prompts = chat_prompts(fake_openai)
    assert "主人's previous message was 9 hours ago." in prompts[1]
    assert "A new conversation; 主人's previous message was 3 days ago." in prompts[2]


# -- recall by time --------------------------------------------------------------------------------


async def two_conversations(companion: Companion, clock: FakeClock, zone: str) -> tuple[Person, ZoneInfo]:
    """Hiking on Monday 23 November, bread late on Sunday 29 November (the user's time), each closed with /new."""
    here = ZoneInfo(zone)
    me = await living_in(companion, clock, zone)
    move_to(clock, datetime(2026, 11, 23, 20, 0, tzinfo=here))
    await me.say("I went hiking in the mountains")
    await close_conversation(companion, me)
    move_to(clock, datetime(2026, 11, 29, 21, 0, tzinfo=here))
    await me.say("I baked sourdough bread")
    await close_conversation(companion, me)
    return me, here


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("question", ["What did we talk about yesterday?", "我们昨天聊了什么？"])
async def test_yesterday_finds_yesterdays_episode_and_not_last_weeks(
    companion: Companion, clock: FakeClock, fake_openai: FakeOpenAIServer, zone: str, question: str
) -> None:
    me, here = await two_conversations(companion, clock, zone)
    move_to(clock, datetime(2026, 11, 30, 0, 30, tzinfo=here))  # just after midnight: Sunday is yesterday
    await me.say(question)
    found = retrieved(fake_openai)
    assert "- [yesterday evening] Talked about this: I baked sourdough bread" in found
    assert "hiking" not in found
    assert not any("hiking" in line for line in quoted(fake_openai))  # a time named keeps to it


TOPICS = [
    "chess",
    "tulips",
    "the dentist",
    "a kite",
    "violin",
    "ramen",
    "a museum",
    "snow",
    "a bus strike",
    "my cousin",
    "sourdough",
    "the marathon",
]


@pytest.mark.parametrize("zone", ZONES)
async def test_after_twelve_daily_conversations_yesterday_quotes_nothing_from_other_days(
    companion: Companion, clock: FakeClock, fake_openai: FakeOpenAIServer, zone: str
) -> None:
    """The leak this rule was written for: with twelve days of episodes, "yesterday" quoted three messages
    of 4-7 days before (their episodes were not in the prompt, so their messages counted as uncovered)."""
    here = ZoneInfo(zone)
    me = await living_in(companion, clock, zone)
    for day, topic in enumerate(TOPICS):
        move_to(clock, datetime(2026, 11, 1 + day, 20, 0, tzinfo=here))
        await me.say(f"Today we talked about {topic}, did we talk about it yesterday?")
        await me.say(f"What did we talk about yesterday? I remember {topic} today.")
        await close_conversation(companion, me)
    move_to(clock, datetime(2026, 11, 13, 9, 0, tzinfo=here))
    await me.say("What did we talk about yesterday?")
    assert "the marathon" in retrieved(fake_openai)  # yesterday's episode
    assert quoted(fake_openai) == []  # yesterday's messages are its episode's; no other day is quoted


@pytest.mark.parametrize("question", ["What did we talk about last time?", "上次我们聊了什么？"])
async def test_last_time_finds_the_last_episode_without_a_word_in_common(
    companion: Companion, clock: FakeClock, fake_openai: FakeOpenAIServer, question: str
) -> None:
    me, here = await two_conversations(companion, clock, "Asia/Shanghai")
    move_to(clock, datetime(2026, 12, 2, 9, 0, tzinfo=here))
    await me.say(question)
    lines = retrieved(fake_openai).strip().splitlines()
    assert lines[0] == "- [last Sunday] Talked about this: I baked sourdough bread"  # the latest first
    assert lines[1] == "- [9 days ago] Talked about this: I went hiking in the mountains"


async def test_an_episode_stored_before_episodes_had_dates_is_found_by_its_stamp(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    me = await living_in(companion, clock, "Asia/Shanghai")
    move_to(clock, datetime(2026, 11, 30, 1, 0, tzinfo=UTC))
    old = kb.add(Scope("xiaoxiang", me.user_id), "[2026-11-29 13:00] 主人说了猫的事", category="episode", source="user")
    assert old.about is None
    await me.say("昨天我们聊了什么")
    assert "- [yesterday evening] 主人说了猫的事" in retrieved(fake_openai)  # 21:00 in Shanghai


# -- plans, states and changes -----------------------------------------------------------------------


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(
    ("said", "op", "asked"),
    [
        (
            "My job interview is next Monday at 10",
            '[ADD about="next Monday 10:00"] Alice has a job interview',
            "I keep thinking about the job interview",
        ),
        ("下周一上午10点我要面试", '[ADD about="下周一上午10点"] 主人有一个面试', "面试好紧张"),
    ],
)
async def test_a_plan_for_monday_reads_as_upcoming_on_sunday_as_past_on_tuesday_then_fades(
    companion: Companion, clock: FakeClock, fake_openai: FakeOpenAIServer, zone: str, said: str, op: str, asked: str
) -> None:
    here = ZoneInfo(zone)
    me = await living_in(companion, clock, zone)
    fake_openai.set_default(MONITOR, monitor_rules({said: op}))
    move_to(clock, datetime(2026, 11, 26, 20, 0, tzinfo=here))  # Thursday
    await me.say(said)
    await settle(companion)
    content = op.split("] ", 1)[1]

    move_to(clock, datetime(2026, 11, 29, 20, 0, tzinfo=here))  # Sunday
    await me.say(asked)
    assert f"- [26 Nov] {content} (coming up: Mon 30 Nov 10:00, tomorrow)" in retrieved(fake_openai)
    move_to(clock, datetime(2026, 12, 1, 20, 0, tzinfo=here))  # Tuesday
    await me.say(asked)
    assert f"- [26 Nov] {content} (was Mon 30 Nov 10:00, now past)" in retrieved(fake_openai)
    move_to(clock, datetime(2026, 12, 7, 10, 0, tzinfo=here))  # a week after it: it has faded from the prompt
    await me.say(asked)
    assert content not in system_message(fake_openai.requests_for(CHAT)[-1])
    await me.say("How did it go last week?" if said.startswith("My") else "上周的事怎么样了")
    assert content in retrieved(fake_openai)  # a message naming its time still finds it


@pytest.mark.parametrize("zone", ZONES)
async def test_a_state_leaves_the_prompt_once_its_until_has_passed(
    companion: Companion, clock: FakeClock, fake_openai: FakeOpenAIServer, zone: str
) -> None:
    here = ZoneInfo(zone)
    me = await living_in(companion, clock, zone)
    fake_openai.set_default(MONITOR, monitor_rules({"出差": '[ADD until="周五"] 主人在上海出差'}))
    move_to(clock, datetime(2026, 11, 23, 9, 0, tzinfo=here))  # Monday
    await me.say("我这周在上海出差，到周五")
    await settle(companion)
    move_to(clock, datetime(2026, 11, 27, 23, 30, tzinfo=here))  # Friday, late
    await me.say("上海出差好累")
    assert "主人在上海出差 (until Fri 27 Nov)" in retrieved(fake_openai)
    move_to(clock, datetime(2026, 11, 28, 0, 30, tzinfo=here))  # Saturday
    await me.say("上海出差好累")
    assert "主人在上海出差" not in system_message(fake_openai.requests_for(CHAT)[-1])


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(
    ("said", "op", "asked"),
    [
        ("I'm so tired today", "[ADD lasts=today] Alice is tired today", "tired again?"),
        ("我今天好累", "[ADD lasts=today] 主人今天很累", "还累吗"),
    ],
    ids=["en", "zh"],
)
async def test_a_state_that_lasts_today_is_gone_from_the_prompt_tomorrow_in_the_users_time_zone(
    companion: Companion, clock: FakeClock, fake_openai: FakeOpenAIServer, zone: str, said: str, op: str, asked: str
) -> None:
    here = ZoneInfo(zone)
    me = await living_in(companion, clock, zone)
    fake_openai.set_default(MONITOR, monitor_rules({said: op}))
    content = op.split("] ", 1)[1]
    move_to(clock, datetime(2026, 11, 26, 20, 0, tzinfo=here))  # Thursday evening
    await me.say(said)
    await settle(companion)
    move_to(clock, datetime(2026, 11, 26, 23, 50, tzinfo=here))  # still today, where she lives
    await me.say(asked)
    assert content in retrieved(fake_openai)
    move_to(clock, datetime(2026, 11, 27, 0, 10, tzinfo=here))  # her tomorrow
    await me.say(asked)
    assert content not in system_message(fake_openai.requests_for(CHAT)[-1])
    move_to(clock, datetime(2026, 11, 27, 21, 0, tzinfo=here))  # tired again that evening: a new state, for today
    await me.say(said)
    await settle(companion)
    await me.say(asked)
    assert content in retrieved(fake_openai)


@pytest.mark.parametrize(
    ("said", "op", "asked"),
    [
        ("I'm crunching on a project this week", "[ADD lasts=week] Alice is crunching on a project", "the project"),
        ("这周我在赶项目", "[ADD lasts=week] 主人这周在赶项目", "项目怎么样"),
    ],
    ids=["en", "zh"],
)
async def test_a_state_that_lasts_this_week_ends_with_sunday_and_an_ongoing_one_stays(
    any_app: App, clock: FakeClock, fake_openai: FakeOpenAIServer, said: str, op: str, asked: str
) -> None:
    companion = any_app.companion  # on the embedded stores and in server mode: the end is kept by both
    here = ZoneInfo("Asia/Shanghai")
    me = await living_in(companion, clock, "Asia/Shanghai")
    lasting = "[ADD lasts=ongoing] " + ("Alice plays the cello" if said.startswith("I") else "主人会拉大提琴")
    fake_openai.set_default(MONITOR, monitor_rules({said: f"{op}\n{lasting}"}))
    move_to(clock, datetime(2026, 11, 25, 9, 0, tzinfo=here))  # Wednesday
    await me.say(said)
    await settle(companion)
    move_to(clock, datetime(2026, 11, 29, 23, 0, tzinfo=here))  # Sunday night
    await me.say(asked)
    assert op.split("] ", 1)[1] in retrieved(fake_openai)
    move_to(clock, datetime(2026, 11, 30, 9, 0, tzinfo=here))  # Monday: a new week
    await me.say(asked)
    system = system_message(fake_openai.requests_for(CHAT)[-1])
    assert op.split("] ", 1)[1] not in system
    assert lasting.split("] ", 1)[1] in system  # no end: it stays


async def test_a_changed_fact_keeps_its_past_value(
    companion: Companion, kb: ChromaKnowledgeBase, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    here = ZoneInfo("Asia/Shanghai")
    me = await living_in(companion, clock, "Asia/Shanghai")

    def change_beijing(body: Body) -> str:
        [beijing] = [memory_id for memory_id, content in memories_in(body).items() if "Beijing" in content]
        return f"[CHANGE:{beijing}] Alice lives in Shanghai"

    fake_openai.set_default(
        MONITOR,
        monitor_rules({"I live in Beijing": "[ADD] Alice lives in Beijing", "moved to Shanghai": change_beijing}),
    )
    move_to(clock, datetime(2026, 10, 22, 20, 0, tzinfo=here))
    await me.say("I live in Beijing")
    await settle(companion)
    move_to(clock, datetime(2026, 11, 28, 20, 0, tzinfo=here))
    await me.say("Big news: I moved to Shanghai, where do you think I live now?")
    await settle(companion)

    await me.say("Do you remember where I live? Beijing or Shanghai?")
    found = retrieved(fake_openai)
    assert "- [28 Nov] Alice lives in Shanghai" in found
    assert "- [used to be true, until 28 Nov] Alice lives in Beijing" in found
    scope = Scope("xiaoxiang", me.user_id)
    [old] = [hit.record for hit in kb.search(scope, "Beijing") if "Beijing" in hit.record.content]
    assert old.until is not None and old.replaced_by is not None
