"""Dates in the monitor's ops ("next Monday 10:00", "明天晚上8点") become moments of the user's time, by code."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from knowledge.dates.moments import find_moment, is_all_day

SHANGHAI = ZoneInfo("Asia/Shanghai")
BERLIN = ZoneInfo("Europe/Berlin")
THURSDAY_EVENING = datetime(2026, 11, 26, 20, 30, tzinfo=SHANGHAI)


def moment(text: str, now: datetime = THURSDAY_EVENING) -> str | None:
    found = find_moment(text, now)
    return None if found is None else f"{found:%a %Y-%m-%d %H:%M}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("next Monday 10:00", "Mon 2026-11-30 10:00"),
        ("next Thursday", "Thu 2026-12-03 00:00"),  # next week's, not today
        ("on Friday", "Fri 2026-11-27 00:00"),  # the coming one
        ("Thursday", "Thu 2026-11-26 00:00"),  # a bare weekday: today counts
        ("this Friday at 3pm", "Fri 2026-11-27 15:00"),
        ("tomorrow evening", "Fri 2026-11-27 19:00"),
        ("tomorrow at 8 in the evening", "Fri 2026-11-27 20:00"),
        ("tonight at 8", "Thu 2026-11-26 20:00"),
        ("the day after tomorrow", "Sat 2026-11-28 00:00"),
        ("in 3 days", "Sun 2026-11-29 00:00"),
        ("two weeks from now", "Thu 2026-12-10 00:00"),
        ("next week", "Mon 2026-11-30 00:00"),
        ("next month", "Tue 2026-12-01 00:00"),
        ("this weekend", "Sat 2026-11-28 00:00"),
        ("30 Nov", "Mon 2026-11-30 00:00"),
        ("Dec 1st at 9:30 am", "Tue 2026-12-01 09:30"),
        ("1 January", "Fri 2027-01-01 00:00"),  # without a year: the nearest one
        ("2026-12-01 09:30", "Tue 2026-12-01 09:30"),
        ("last Friday", "Fri 2026-11-20 00:00"),  # an event in the past
        ("yesterday", "Wed 2026-11-25 00:00"),
        ("10:00", "Fri 2026-11-27 10:00"),  # a time alone: the next one
        ("下周一上午10点", "Mon 2026-11-30 10:00"),
        ("明天晚上8点", "Fri 2026-11-27 20:00"),
        ("今晚8点", "Thu 2026-11-26 20:00"),
        ("后天", "Sat 2026-11-28 00:00"),
        ("周五", "Fri 2026-11-27 00:00"),
        ("这周一", "Mon 2026-11-23 00:00"),
        ("上周五", "Fri 2026-11-20 00:00"),
        ("三天后", "Sun 2026-11-29 00:00"),
        ("两周后", "Thu 2026-12-10 00:00"),
        ("下个月", "Tue 2026-12-01 00:00"),
        ("12月3日", "Thu 2026-12-03 00:00"),
        ("2027年1月5号", "Tue 2027-01-05 00:00"),
        ("下午3点半", "Fri 2026-11-27 15:30"),
        ("三天前", "Mon 2026-11-23 00:00"),
    ],
)
def test_english_and_chinese_dates_become_local_moments(text: str, expected: str) -> None:
    assert moment(text) == expected


@pytest.mark.parametrize("text", ["soon", "some day", "改天", "whenever", "30 February"])
def test_what_the_grammar_cannot_read_is_none_not_a_guess(text: str) -> None:
    assert find_moment(text, THURSDAY_EVENING) is None


def test_a_day_without_a_time_is_all_day_in_the_users_zone() -> None:
    monday = find_moment("next Monday", THURSDAY_EVENING)
    assert monday is not None and is_all_day(monday)
    assert not is_all_day(monday.astimezone(BERLIN))  # 17:00 the day before, in Berlin
    assert not is_all_day(find_moment("next Monday 10:00", THURSDAY_EVENING))  # type: ignore[arg-type]


def test_tomorrow_is_the_users_tomorrow_around_midnight_and_across_zones() -> None:
    late_in_berlin = datetime(2026, 11, 26, 23, 50, tzinfo=BERLIN)  # already Friday 06:50 in Shanghai
    assert moment("tomorrow 10:00", late_in_berlin) == "Fri 2026-11-27 10:00"
    assert moment("tomorrow 10:00", late_in_berlin.astimezone(SHANGHAI)) == "Sat 2026-11-28 10:00"


def test_a_time_across_a_daylight_saving_change_is_local_wall_time() -> None:
    before_the_change = datetime(2026, 10, 24, 12, 0, tzinfo=BERLIN)  # clocks go back on Sunday 25 October
    found = find_moment("tomorrow 10:00", before_the_change)
    assert found is not None and f"{found:%H:%M %Z}" == "10:00 CET"
    assert found.astimezone(UTC) - before_the_change.astimezone(UTC) == timedelta(hours=23)


def test_a_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        find_moment("tomorrow", datetime(2026, 11, 26, 20, 30))
