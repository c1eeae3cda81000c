"""The time rules of memories: plans that pass and fade, states that end, changed facts kept as the past."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from knowledge.dates.windows import find_window
from knowledge.records import MemoryRecord, Scope
from knowledge.rules.decay import MemoryPolicy
from knowledge.rules.temporal import episode_moment, has_ended, in_prompt, in_window, plan_stage, without_stamp

SHANGHAI = ZoneInfo("Asia/Shanghai")
NEW_YORK = ZoneInfo("America/New_York")
POLICY = MemoryPolicy()
ALICE = Scope("xiaoxiang", "cli:alice")


def memory(content: str = "主人有面试", *, learned: datetime, **fields: object) -> MemoryRecord:
    return replace(
        MemoryRecord(
            id="mem_1",
            scope=ALICE,
            content=content,
            category="fact",
            importance=1.0,
            created_at=learned,
            last_access=learned,
            source="background_ai",
        ),
        **fields,
    )


@pytest.mark.parametrize("zone", [SHANGHAI, NEW_YORK])
def test_a_plan_for_monday_is_upcoming_on_sunday_past_on_tuesday_and_fades_a_week_later(zone: ZoneInfo) -> None:
    thursday = datetime(2026, 11, 26, 20, 0, tzinfo=zone)
    monday = datetime(2026, 11, 30, tzinfo=zone)  # a whole day: local midnight
    plan = memory(learned=thursday, about=monday.astimezone(UTC))
    assert plan_stage(plan, datetime(2026, 11, 29, 23, 59, tzinfo=zone), POLICY) == "upcoming"
    assert plan_stage(plan, datetime(2026, 11, 30, 18, 0, tzinfo=zone), POLICY) == "upcoming"  # all of Monday
    assert plan_stage(plan, datetime(2026, 12, 1, 9, 0, tzinfo=zone), POLICY) == "past"
    assert in_prompt(plan, datetime(2026, 12, 1, 9, 0, tzinfo=zone), POLICY)
    faded = datetime(2026, 12, 8, 0, 0, tzinfo=zone)  # past_plan_days after the day ended
    assert plan_stage(plan, faded - timedelta(minutes=1), POLICY) == "past"
    assert plan_stage(plan, faded, POLICY) == "faded" and not in_prompt(plan, faded, POLICY)
    assert in_prompt(plan, faded, replace(POLICY, past_plan_days=30))  # a persona may keep them longer


def test_a_plan_at_a_time_is_past_once_that_time_has_come() -> None:
    ten = datetime(2026, 11, 30, 10, 0, tzinfo=SHANGHAI)
    plan = memory(learned=ten - timedelta(days=4), about=ten)
    assert plan_stage(plan, ten - timedelta(minutes=1), POLICY) == "upcoming"
    assert plan_stage(plan, ten, POLICY) == "past"


def test_a_memory_about_a_moment_before_it_was_learned_is_an_event_not_a_plan() -> None:
    friday = datetime(2026, 11, 20, tzinfo=SHANGHAI)
    concert = memory("主人去了演唱会", learned=friday + timedelta(days=2), about=friday)
    assert plan_stage(concert, friday + timedelta(days=60), POLICY) is None
    assert in_prompt(concert, friday + timedelta(days=60), POLICY)  # events keep their date and decay as facts


def test_a_state_past_its_until_leaves_the_prompt_but_a_changed_facts_old_value_stays() -> None:
    learned = datetime(2026, 11, 23, 9, 0, tzinfo=SHANGHAI)
    trip = memory("主人在出差", learned=learned, until=datetime(2026, 11, 27, tzinfo=SHANGHAI))  # until Friday
    assert not has_ended(trip, datetime(2026, 11, 27, 23, 0, tzinfo=SHANGHAI))  # Friday is included
    saturday = datetime(2026, 11, 28, 0, 0, tzinfo=SHANGHAI)
    assert has_ended(trip, saturday) and not in_prompt(trip, saturday, POLICY)
    moved = memory("主人住在北京", learned=learned, until=learned + timedelta(days=1), replaced_by="mem_2")
    assert has_ended(moved, saturday) and in_prompt(moved, saturday, POLICY)


def test_an_episode_is_dated_by_its_conversation_also_in_stores_from_before_dates() -> None:
    stamp = "[2026-11-25 12:30] 聊了面试"
    stored_later = datetime(2026, 11, 25, 13, 30, tzinfo=UTC)
    old = replace(memory(stamp, learned=stored_later), category="episode")
    assert episode_moment(old) == datetime(2026, 11, 25, 12, 30, tzinfo=UTC)  # the stamp, UTC
    about = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    assert episode_moment(replace(old, about=about)) == about
    assert episode_moment(replace(old, content="no stamp")) == stored_later
    assert without_stamp(stamp) == "聊了面试" and without_stamp("[not a stamp] x") == "[not a stamp] x"


def test_windows_find_episodes_by_their_time_and_facts_by_learned_changed_or_about() -> None:
    now = datetime(2026, 11, 26, 20, 30, tzinfo=SHANGHAI)
    yesterday = find_window("yesterday", now)
    assert yesterday is not None
    wednesday_noon = datetime(2026, 11, 25, 12, 0, tzinfo=SHANGHAI)
    last_week = wednesday_noon - timedelta(days=7)
    episode = replace(memory("聊了面试", learned=now), category="episode", about=wednesday_noon)
    assert in_window(episode, yesterday)  # stored today, about yesterday's conversation
    assert not in_window(replace(episode, about=last_week), yesterday)
    assert in_window(memory(learned=wednesday_noon), yesterday)
    assert in_window(memory(learned=last_week, changed_at=wednesday_noon), yesterday)
    assert in_window(memory(learned=last_week, about=wednesday_noon), yesterday)
    assert not in_window(memory(learned=last_week), yesterday)
