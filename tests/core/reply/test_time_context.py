"""What a prompt says about time: the user's now, and when each memory is from, in their own zone."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from core.reply.time_context import TurnTime, memory_line, now_section, relative_day
from knowledge.records import MemoryRecord, Scope
from knowledge.rules.decay import MemoryPolicy

SHANGHAI = ZoneInfo("Asia/Shanghai")
BERLIN = ZoneInfo("Europe/Berlin")
POLICY = MemoryPolicy()


def at(now: datetime, previous: timedelta | None = None, *, new: bool = False) -> TurnTime:
    return TurnTime(now, None if previous is None else now - previous, new, now)


def fact(content: str, learned: datetime, **fields: object) -> MemoryRecord:
    record = MemoryRecord(
        id="mem_1",
        scope=Scope("xiaoxiang", "cli:alice"),
        content=content,
        category="fact",
        importance=1.0,
        created_at=learned,
        last_access=learned,
        source="user",
    )
    return replace(record, **fields)


def test_now_is_the_users_date_weekday_and_time_of_day_around_midnight_in_two_zones() -> None:
    moment = datetime(2026, 11, 27, 23, 30, tzinfo=UTC)  # Friday night in London
    in_shanghai = now_section(at(moment.astimezone(SHANGHAI), timedelta(minutes=5)), "主人")
    in_berlin = now_section(at(moment.astimezone(BERLIN), timedelta(minutes=5)), "Alice")
    assert in_shanghai == "## Now\nSaturday 28 November 2026, 07:30 (morning) where 主人 is."
    assert in_berlin == "## Now\nSaturday 28 November 2026, 00:30 (night) where Alice is."
    a_minute_earlier = now_section(at(datetime(2026, 11, 27, 23, 59, tzinfo=BERLIN)), "Alice")
    assert a_minute_earlier.startswith("## Now\nFriday 27 November 2026, 23:59 (night)")


def test_now_across_a_daylight_saving_change_is_local_wall_time() -> None:
    # Berlin's clocks went back at 03:00 on Sunday 25 October 2026: 01:30 UTC is 02:30 CET
    assert "Sunday 25 October 2026, 02:30" in now_section(
        at(datetime(2026, 10, 25, 1, 30, tzinfo=UTC).astimezone(BERLIN)), "A"
    )
    assert "Sunday 25 October 2026, 02:30" in now_section(
        at(datetime(2026, 10, 25, 0, 30, tzinfo=UTC).astimezone(BERLIN)), "A"
    )


def test_silence_is_said_when_it_matters() -> None:
    now = datetime(2026, 11, 28, 19, 5, tzinfo=BERLIN)
    assert now_section(at(now, None, new=True), "主人").endswith("This is the first time 主人 writes to you.")
    assert now_section(at(now, timedelta(days=3), new=True), "主人").endswith(
        "A new conversation; 主人's previous message was 3 days ago."
    )
    assert now_section(at(now, timedelta(hours=5)), "主人").endswith("主人's previous message was 5 hours ago.")
    assert now_section(at(now, timedelta(minutes=3)), "主人").endswith("(evening) where 主人 is.")  # nothing to say


@pytest.mark.parametrize(
    ("ago", "expected"),
    [
        (timedelta(hours=2), "this afternoon"),  # Saturday 16:00
        (timedelta(hours=20), "last night"),  # Friday 22:00
        (timedelta(hours=26), "yesterday afternoon"),
        (timedelta(days=3), "on Wednesday"),  # this week
        (timedelta(days=6), "last Sunday"),
        (timedelta(days=10), "10 days ago"),
        (timedelta(days=7, hours=20), "8 days ago"),  # counted in calendar days
        (timedelta(days=23), "3 weeks ago"),
        (timedelta(days=95), "3 months ago"),
    ],
)
def test_an_episode_is_dated_relative_to_now(ago: timedelta, expected: str) -> None:
    now = datetime(2026, 11, 28, 18, 0, tzinfo=SHANGHAI)  # a Saturday
    assert relative_day(now - ago, now) == expected


def test_memory_lines_carry_when_they_were_learned_and_what_their_dates_mean() -> None:
    sunday = datetime(2026, 11, 29, 20, 0, tzinfo=SHANGHAI)
    learned = datetime(2026, 11, 26, 21, 0, tzinfo=SHANGHAI)
    monday = datetime(2026, 11, 30, tzinfo=SHANGHAI)
    plan = fact("主人有面试", learned, about=monday.astimezone(UTC))
    assert memory_line(plan, at(sunday), POLICY) == "- [26 Nov] 主人有面试 (coming up: Mon 30 Nov, tomorrow)"
    tuesday = sunday + timedelta(days=2)
    assert memory_line(plan, at(tuesday), POLICY) == "- [26 Nov] 主人有面试 (was Mon 30 Nov, now past)"
    timed = fact("主人有面试", learned, about=datetime(2026, 11, 30, 10, 0, tzinfo=SHANGHAI))
    assert memory_line(timed, at(sunday), POLICY).endswith("(coming up: Mon 30 Nov 10:00, tomorrow)")
    trip = fact("主人在出差", learned, until=datetime(2026, 12, 4, tzinfo=SHANGHAI))
    assert memory_line(trip, at(sunday), POLICY) == "- [26 Nov] 主人在出差 (until Fri 4 Dec)"
    moved = fact("主人住在北京", datetime(2025, 3, 1, tzinfo=SHANGHAI), until=learned, replaced_by="mem_2")
    assert memory_line(moved, at(sunday), POLICY) == "- [used to be true, until 26 Nov] 主人住在北京"
    updated = fact("主人喜欢拉面", datetime(2025, 3, 1, tzinfo=SHANGHAI), changed_at=learned)
    assert memory_line(updated, at(sunday), POLICY) == "- [26 Nov] 主人喜欢拉面"  # dated when it last changed
    assert memory_line(fact("x", datetime(2025, 3, 1, tzinfo=SHANGHAI)), at(sunday), POLICY) == "- [Mar 2025] x"
    episode = replace(
        fact("[2026-11-28 11:00] 聊了面试", learned, about=datetime(2026, 11, 28, 11, 0, tzinfo=UTC)),
        category="episode",
    )
    assert memory_line(episode, at(sunday), POLICY) == "- [yesterday evening] 聊了面试"  # 19:00 in Shanghai
