"""Check-ins end to end through the app: the real stores, job queue and fake OpenAI server, on a fake clock.

The platform is a recording `Outbox` (the seam every adapter implements); the Telegram and Discord
adapters' own outboxes are tested in tests/bot/.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from bot.app import App, build_app
from bot.config import CheckinSettings, Settings
from core import phrasebook
from core.checkins import CheckinJob
from core.errors import RecipientRefusedError
from core.types import ConversationRef, IncomingMessage, UserRef
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock
from tests.fakes.crash import CrashAt
from tests.fakes.openai_server import FakeError, FakeOpenAIServer

BERLIN = ZoneInfo("Europe/Berlin")
ALICE = Scope("xiaoxiang", "cli:alice")
CHECKIN = "How did the interview go, 主人?"


class RecordingOutbox:
    """An outbox that keeps what it was given, when (by the app's clock); it can refuse like a platform."""

    def __init__(self, clock: FakeClock, refusal: str | None = None) -> None:
        self.sent: list[tuple[datetime, str, str]] = []
        self._clock = clock
        self._refusal = refusal

    def reaches(self, user: UserRef) -> bool:
        return user.platform == "cli"

    async def deliver(self, user: UserRef, conversation: ConversationRef, text: str) -> None:
        if self._refusal is not None:
            raise RecipientRefusedError(self._refusal)
        self.sent.append((self._clock.now(), str(user), text))


def local(day: int, hour: int, minute: int = 0) -> datetime:
    """A moment of January 2026 in Berlin (Monday is the 5th)."""
    return datetime(2026, 1, day, hour, minute, tzinfo=BERLIN)


async def say(app: App, text: str, scope: Scope = ALICE) -> str:
    """The user writes in private; returns the reply."""
    user = UserRef.parse(scope.user_id)
    message = IncomingMessage(
        conversation=ConversationRef(user.platform, "", user.id),
        user=user,
        speaker_name=user.id,
        text=text,
        sent_at=app.companion.clock.now(),
    )
    result = await app.companion.handle(message)
    return await result.text()


async def consenting(app: App, scope: Scope = ALICE) -> None:
    """The user has talked once, in Berlin, and said /checkins on."""
    app.companion.user_settings.set_time_zone(scope, BERLIN)
    await say(app, "hi", scope)
    assert (await app.companion.checkins_command(scope, "on")).startswith("Okay")


def plan_interview(app: App, at: datetime, scope: Scope = ALICE, text: str = "主人 has a job interview") -> str:
    record = app.companion.knowledge.add(scope, text, category="fact", source="user", about=at)
    return record.id


async def pass_time(app: App, clock: FakeClock, until: datetime, *, step: timedelta = timedelta(minutes=30)) -> None:
    """Move the clock to `until`, running the planning pass (and the jobs it starts) at every step."""
    while clock.now() < until:
        clock.advance(seconds=step.total_seconds())
        await app.companion.checkins.plan()
        await app.companion.tasks.drain()


@pytest.fixture
def outbox(app: App, clock: FakeClock) -> RecordingOutbox:
    recording = RecordingOutbox(clock)
    app.companion.checkins.add_outbox(recording)
    return recording


@pytest.fixture(autouse=True)
def _replies(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_default("chat-model", CHECKIN)
    fake_openai.set_default("monitor-model", "[SKIP]")


@pytest.mark.parametrize(
    ("plan", "earliest", "latest"),
    [
        (local(5, 10), local(5, 12), local(5, 13)),  # Monday 10:00: asked on Monday afternoon
        (local(5, 21), local(6, 9), local(6, 10)),  # Monday 21:00: 23:00 is night, so Tuesday morning
        (local(5, 0), local(6, 9), local(6, 10)),  # Monday, all day: once the day is over, Tuesday morning
    ],
)
async def test_a_plan_on_monday_gives_exactly_one_checkin_on_monday_afternoon_or_tuesday_in_the_users_zone(
    app: App,
    clock: FakeClock,
    outbox: RecordingOutbox,
    fake_openai: FakeOpenAIServer,
    plan: datetime,
    earliest: datetime,
    latest: datetime,
) -> None:
    await consenting(app)
    plan_interview(app, plan)
    await pass_time(app, clock, local(8, 12))
    assert [text for _, _, text in outbox.sent] == [CHECKIN]
    sent_at = outbox.sent[0][0]
    assert earliest <= sent_at <= latest
    assert 9 <= sent_at.astimezone(BERLIN).hour < 22  # never in the user's night
    # the prompt says why it writes, and carries the memory that triggered it
    system = str(fake_openai.requests_for("chat-model")[-1].messages[0]["content"])
    assert "Why you are writing first" in system and "job interview" in system and "Ask how it went" in system


async def test_nothing_due_means_no_model_call_and_no_job(
    app: App, clock: FakeClock, outbox: RecordingOutbox, fake_openai: FakeOpenAIServer
) -> None:
    await consenting(app)
    plan_interview(app, local(20, 10))  # weeks away
    chat_calls = len(fake_openai.requests_for("chat-model"))
    await pass_time(app, clock, local(6, 12), step=timedelta(hours=2))
    assert outbox.sent == []
    assert len(fake_openai.requests_for("chat-model")) == chat_calls
    assert not [job for job in app.journal.jobs.pending_jobs() if job.kind == CheckinJob.KIND]


async def test_none_without_consent_and_off_cancels_what_is_planned_at_once(
    app: App, clock: FakeClock, outbox: RecordingOutbox
) -> None:
    app.companion.user_settings.set_time_zone(ALICE, BERLIN)
    await say(app, "hi")
    plan_interview(app, local(5, 10))
    await pass_time(app, clock, local(6, 7))
    assert outbox.sent == []  # off by default
    await app.companion.checkins_command(ALICE, "on")
    await app.companion.checkins.plan()  # Monday's plan is still timely: asked on Tuesday, once it is day
    await app.companion.tasks.drain()
    [planned] = app.journal.checkins.listing(since=clock.now())
    assert planned.state == "planned" and planned.due_at == local(6, 9)
    assert await app.companion.checkins_command(ALICE, "off") == phrasebook.checkins_switched(False)
    assert {each.state for each in app.journal.checkins.listing(since=clock.now() - timedelta(days=1))} == {"cancelled"}
    await pass_time(app, clock, local(9, 12))
    assert outbox.sent == []
    assert "Check-ins are off" in await app.companion.memory_listing(ALICE)


async def test_none_after_two_unanswered_until_the_user_writes_and_at_most_one_a_day(
    app: App, clock: FakeClock, outbox: RecordingOutbox
) -> None:
    await consenting(app)
    for day in (5, 6, 7):
        plan_interview(app, local(day, 10), text=f"主人 has an exam on the {day}th")
    plan_interview(app, local(5, 11), text="主人 has a second exam on the 5th")
    await pass_time(app, clock, local(8, 23))
    assert len(outbox.sent) == 2  # Monday's and Tuesday's; Wednesday's waits for an answer that never came
    assert len({sent_at.astimezone(BERLIN).date() for sent_at, _, _ in outbox.sent}) == 2  # one a day
    dropped = {each.note for each in app.journal.checkins.listing(since=local(5, 0)) if each.state == "dropped"}
    assert "2 check-ins unanswered" in dropped
    await say(app, "sorry, busy week")
    plan_interview(app, local(9, 10), text="主人 moves house")
    await pass_time(app, clock, local(9, 18))
    assert len(outbox.sent) == 3


async def test_never_while_a_conversation_is_active(app: App, clock: FakeClock, outbox: RecordingOutbox) -> None:
    await consenting(app)
    plan_interview(app, local(5, 10))
    clock.advance(seconds=(local(5, 12, 5) - clock.now()).total_seconds())
    await say(app, "I am talking to you right now")  # 12:05, just after the check-in fell due
    await app.companion.checkins.plan()
    await app.companion.tasks.drain()
    assert outbox.sent == []
    await pass_time(app, clock, local(5, 16), step=timedelta(minutes=10))
    assert len(outbox.sent) == 1
    assert outbox.sent[0][0] >= local(5, 12, 35)  # half an hour after the last message


async def test_the_users_reply_continues_the_conversation_with_the_checkin_in_the_prompt(
    app: App, clock: FakeClock, outbox: RecordingOutbox, fake_openai: FakeOpenAIServer
) -> None:
    await consenting(app)
    plan_interview(app, local(5, 10))
    await pass_time(app, clock, local(5, 20))  # sent at noon; the evening passes without an answer
    assert len(outbox.sent) == 1
    await app.companion.lifecycle.summarize_idle()  # the conversation stays open for the answer
    fake_openai.script("chat-model", "That's wonderful!")
    assert await say(app, "It went great, they liked me") == "That's wonderful!"
    prompt = fake_openai.requests_for("chat-model")[-1].messages
    assert {"role": "assistant", "content": CHECKIN} in [
        {"role": message["role"], "content": message["content"]} for message in prompt
    ]
    assert app.journal.checkins.contact(ALICE).unanswered == 0  # type: ignore[union-attr]


async def test_a_refusing_platform_turns_checkins_off_with_the_reason_kept(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    app.companion.checkins.add_outbox(RecordingOutbox(clock, refusal="Forbidden: bot was blocked by the user"))
    await consenting(app)
    plan_interview(app, local(5, 10))
    await pass_time(app, clock, local(5, 14))
    assert app.companion.user_settings.chosen_checkins(ALICE) is False
    [failed] = [each for each in app.journal.checkins.listing(since=local(5, 0)) if each.state == "failed"]
    assert "bot was blocked by the user" in failed.note
    assert "bot was blocked by the user" in await app.companion.memory_listing(ALICE)


async def test_a_checkin_the_model_cannot_write_fails_visibly_instead_of_waiting_for_ever(
    app: App, clock: FakeClock, outbox: RecordingOutbox, fake_openai: FakeOpenAIServer
) -> None:
    await consenting(app)
    plan_interview(app, local(5, 10))
    fake_openai.set_default("chat-model", FakeError(500))  # every call, every retry
    await pass_time(app, clock, local(5, 14))
    assert outbox.sent == []
    [failed] = app.journal.checkins.listing(since=local(5, 0))
    assert failed.state == "failed" and "could not be written" in failed.note
    assert [letter.kind for letter in app.journal.jobs.dead_letters(ALICE)] == [CheckinJob.KIND]


async def test_a_kept_date_comes_on_its_day_every_year_in_the_users_daytime(
    app: App, clock: FakeClock, outbox: RecordingOutbox
) -> None:
    await consenting(app)
    app.companion.knowledge.add(
        ALICE, "主人's birthday", category="core", source="user", about=datetime(1995, 1, 7, tzinfo=BERLIN)
    )
    await pass_time(app, clock, local(8, 12), step=timedelta(hours=1))
    assert len(outbox.sent) == 1
    assert local(7, 9) <= outbox.sent[0][0] < local(7, 11)


async def test_a_long_silence_after_an_active_stretch_gets_one_checkin_and_never_another(
    app: App, clock: FakeClock, outbox: RecordingOutbox, fake_openai: FakeOpenAIServer
) -> None:
    await consenting(app)
    for _ in range(3):  # three days in a row
        clock.advance(days=1)
        await say(app, "good evening")
    last = clock.now()
    await pass_time(app, clock, last + timedelta(days=12), step=timedelta(hours=1))
    assert len(outbox.sent) == 1
    assert last + timedelta(days=4) <= outbox.sent[0][0] <= last + timedelta(days=5)
    system = str(fake_openai.requests_for("chat-model")[-1].messages[0]["content"])
    assert "has not written for 4 days" in system


async def test_a_checkin_after_a_silence_may_follow_up_on_what_is_going_on_in_the_users_life(
    app: App, clock: FakeClock, outbox: RecordingOutbox, fake_openai: FakeOpenAIServer
) -> None:
    await consenting(app)
    for _ in range(3):
        clock.advance(days=1)
        await say(app, "good evening")
    now = clock.now()
    app.journal.threads.open(
        ALICE, "thr_1", "搬家", "下周搬到上海", since=now, at=now, message_ids=[], place=None
    )  # what the monitor opened from a private chat
    await pass_time(app, clock, now + timedelta(days=6), step=timedelta(hours=1))
    assert len(outbox.sent) == 1
    system = str(fake_openai.requests_for("chat-model")[-1].messages[0]["content"])
    assert "搬家 (since" in system and "下周搬到上海" in system and "you may ask how it goes" in system


async def test_a_restart_between_planning_and_sending_sends_it_once(
    settings: Settings, clock: FakeClock, embedder: Embedder
) -> None:
    first = await build_app(settings, clock=clock, embedder=embedder, backoff=(0.01,))
    await consenting(first)
    plan_interview(first, local(5, 10))
    clock.advance(seconds=(local(5, 12, 30) - clock.now()).total_seconds())
    await first.companion.checkins.plan()  # planned and due, but this process has no platform to send on
    await first.aclose()

    crash = CrashAt("checkin: sent, not recorded")  # the next start dies right after sending
    second = await build_app(settings, clock=clock, embedder=embedder, backoff=(0.01,), crash_point=crash)
    outbox = RecordingOutbox(clock)
    second.companion.checkins.add_outbox(outbox)
    await second.companion.checkins.plan()
    await second.companion.tasks.drain()
    await second.aclose()
    third = await build_app(settings, clock=clock, embedder=embedder, backoff=(0.01,))
    third.companion.checkins.add_outbox(outbox)
    third.companion.tasks.resume()
    await third.companion.checkins.plan()
    await third.companion.tasks.drain()
    try:
        assert [text for _, _, text in outbox.sent] == [CHECKIN]
        [done] = third.journal.checkins.listing(since=local(5, 0))
        assert done.state == "sent"
        window = third.working_memory.window("xiaoxiang", ALICE.user_id)
        assert [message.content for message in window if message.role == "assistant"][-1] == CHECKIN
    finally:
        await third.aclose()


async def test_the_feature_switched_off_plans_nothing(settings: Settings, clock: FakeClock, embedder: Embedder) -> None:
    off = settings.model_copy(update={"checkins": CheckinSettings(enabled=False)})
    app = await build_app(off, clock=clock, embedder=embedder)
    try:
        outbox = RecordingOutbox(clock)
        app.companion.checkins.add_outbox(outbox)
        app.companion.user_settings.set_checkins(ALICE, True)
        await say(app, "hi")
        plan_interview(app, local(5, 10))
        await pass_time(app, clock, local(6, 12), step=timedelta(hours=2))
        assert outbox.sent == []
        assert "switched off" in await app.companion.checkins_command(ALICE, "on")
    finally:
        await app.aclose()
