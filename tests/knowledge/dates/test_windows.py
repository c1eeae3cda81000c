"""Time named in a message becomes a window of the user's local time, computed by code.

The rule: docs/development/design-rules.md#time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from knowledge.dates.windows import TimeWindow, find_window

SHANGHAI = ZoneInfo("Asia/Shanghai")
BERLIN = ZoneInfo("Europe/Berlin")
THURSDAY_EVENING = datetime(2026, 11, 26, 20, 30, tzinfo=SHANGHAI)


def window(text: str, now: datetime = THURSDAY_EVENING) -> tuple[str, str] | None:
    found = find_window(text, now)
    return None if found is None else (f"{found.start:%a %m-%d %H:%M}", f"{found.end:%a %m-%d %H:%M}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What did we talk about yesterday?", ("Wed 11-25 00:00", "Thu 11-26 00:00")),
        ("yesterday evening I was sad", ("Wed 11-25 17:00", "Thu 11-26 00:00")),
        ("last night", ("Wed 11-25 18:00", "Thu 11-26 06:00")),
        ("the day before yesterday", ("Tue 11-24 00:00", "Wed 11-25 00:00")),
        ("this morning", ("Thu 11-26 05:00", "Thu 11-26 12:00")),
        ("last week", ("Mon 11-16 00:00", "Mon 11-23 00:00")),
        ("this week", ("Mon 11-23 00:00", "Thu 11-26 20:30")),  # never past now
        ("on Monday", ("Mon 11-23 00:00", "Tue 11-24 00:00")),
        ("last Thursday", ("Thu 11-19 00:00", "Fri 11-20 00:00")),  # today is Thursday: the one before
        ("in March", ("Sun 03-01 00:00", "Wed 04-01 00:00")),
        ("in December", ("Mon 12-01 00:00", "Thu 01-01 00:00")),  # not yet this year: last year's
        ("two days ago", ("Tue 11-24 00:00", "Wed 11-25 00:00")),
        ("12 days ago", ("Sat 11-14 00:00", "Sun 11-15 00:00")),
        ("a few days ago", ("Fri 11-20 00:00", "Wed 11-25 00:00")),  # 2 to 6 days back
        ("3 weeks ago", ("Mon 11-02 00:00", "Mon 11-09 00:00")),
        ("a couple of months ago", ("Tue 09-01 00:00", "Thu 10-01 00:00")),
        ("last month", ("Thu 10-01 00:00", "Sun 11-01 00:00")),
        ("我们昨天聊了什么？", ("Wed 11-25 00:00", "Thu 11-26 00:00")),
        ("昨晚", ("Wed 11-25 17:00", "Thu 11-26 06:00")),
        ("前天", ("Tue 11-24 00:00", "Wed 11-25 00:00")),
        ("大前天", ("Mon 11-23 00:00", "Tue 11-24 00:00")),
        ("上周我们聊了什么", ("Mon 11-16 00:00", "Mon 11-23 00:00")),
        ("上周五", ("Fri 11-20 00:00", "Sat 11-21 00:00")),
        ("上个星期天", ("Sun 11-22 00:00", "Mon 11-23 00:00")),
        ("周一", ("Mon 11-23 00:00", "Tue 11-24 00:00")),
        ("三天前", ("Mon 11-23 00:00", "Tue 11-24 00:00")),
        ("十二天前", ("Sat 11-14 00:00", "Sun 11-15 00:00")),
        ("前几天", ("Fri 11-20 00:00", "Wed 11-25 00:00")),
        ("两个月前", ("Tue 09-01 00:00", "Thu 10-01 00:00")),
        ("三月", ("Sun 03-01 00:00", "Wed 04-01 00:00")),
        ("去年三月", ("Sat 03-01 00:00", "Tue 04-01 00:00")),
        ("上个月", ("Thu 10-01 00:00", "Sun 11-01 00:00")),
    ],
)
def test_english_and_chinese_expressions_become_local_windows(text: str, expected: tuple[str, str]) -> None:
    assert window(text) == expected


@pytest.mark.parametrize("text", ["last time we talked", "what did we do last time?", "上次我们聊了什么", "上回"])
def test_last_time_is_everything_before_now_for_the_caller_to_take_the_latest(text: str) -> None:
    found = find_window(text, THURSDAY_EVENING)
    assert found is not None and found.last_time and found.end == THURSDAY_EVENING
    assert datetime(2020, 1, 1, tzinfo=SHANGHAI) in found


@pytest.mark.parametrize(
    "text", ["I love ramen", "next Monday is my interview", "下周一面试", "Maybe we could talk later", "我们"]
)
def test_no_past_time_named_means_no_window(text: str) -> None:
    assert find_window(text, THURSDAY_EVENING) is None


def test_the_first_expression_in_the_message_wins() -> None:
    assert find_window("yesterday, not last week", THURSDAY_EVENING).phrase == "yesterday"  # type: ignore[union-attr]
    assert find_window("上周五还是昨天？", THURSDAY_EVENING).phrase == "上周五"  # type: ignore[union-attr]


def test_yesterday_is_the_users_yesterday_around_midnight_and_across_zones() -> None:
    just_after_midnight = datetime(2026, 11, 27, 0, 10, tzinfo=SHANGHAI)  # Berlin is still on the 26th
    assert window("yesterday", just_after_midnight) == ("Thu 11-26 00:00", "Fri 11-27 00:00")
    in_berlin = just_after_midnight.astimezone(BERLIN)
    assert window("yesterday", in_berlin) == ("Wed 11-25 00:00", "Thu 11-26 00:00")


def test_a_day_across_a_daylight_saving_change_is_the_local_calendar_day() -> None:
    after_the_change = datetime(2026, 10, 26, 12, 0, tzinfo=BERLIN)  # clocks went back on Sunday 25 October
    found = find_window("yesterday", after_the_change)
    assert found is not None and (found.start.hour, found.end.hour) == (0, 0)
    assert found.end.astimezone(UTC) - found.start.astimezone(UTC) == timedelta(hours=25)


def test_a_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        find_window("yesterday", datetime(2026, 11, 26, 20, 30))


def test_a_window_holds_its_start_and_not_its_end() -> None:
    found = TimeWindow(THURSDAY_EVENING.replace(hour=0), THURSDAY_EVENING, "today")
    assert THURSDAY_EVENING.replace(hour=0) in found and THURSDAY_EVENING not in found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What did we do in July 2025?", ("Tue 07-01 00:00", "Fri 08-01 00:00")),
        ("on 23 January, 2026", ("Fri 01-23 00:00", "Sat 01-24 00:00")),
        ("as mentioned on November 6, 2025", ("Thu 11-06 00:00", "Fri 11-07 00:00")),
        ("2026-03-14 was fun", ("Sat 03-14 00:00", "Sun 03-15 00:00")),
        ("what happened in 2025", ("Wed 01-01 00:00", "Thu 01-01 00:00")),
        ("2025年7月我们去了哪里", ("Tue 07-01 00:00", "Fri 08-01 00:00")),
        ("2026年3月14日", ("Sat 03-14 00:00", "Sun 03-15 00:00")),
    ],
)
def test_calendar_dates_name_their_year_month_or_day(text: str, expected: tuple[str, str]) -> None:
    assert window(text) == expected


def test_a_calendar_date_wins_over_relative_words_it_anchors() -> None:
    # "last week, as mentioned on 6 November": the date says when; the relative words were relative to it
    found = find_window("What was the issue last week, as mentioned on November 6, 2025?", THURSDAY_EVENING)
    assert found is not None and found.phrase == "November 6, 2025"


def test_a_calendar_date_still_to_come_names_no_window() -> None:
    assert find_window("in December 2026", THURSDAY_EVENING) is None
    assert find_window("on 30 February, 2026", THURSDAY_EVENING) is not None  # no such day: its month


@pytest.mark.parametrize(
    ("text", "now", "expected"),
    [
        ("去年夏天我们聊过什么", THURSDAY_EVENING, ("2025-06-01", "2025-09-01")),
        ("今年春天", THURSDAY_EVENING, ("2026-03-01", "2026-06-01")),
        ("前年冬天", THURSDAY_EVENING, ("2024-12-01", "2025-03-01")),
        ("what did we do last summer?", THURSDAY_EVENING, ("2026-06-01", "2026-09-01")),
        ("last autumn", THURSDAY_EVENING, ("2025-09-01", "2025-12-01")),  # autumn now: the one before
        ("last winter", datetime(2027, 1, 10, tzinfo=SHANGHAI), ("2025-12-01", "2026-03-01")),
        ("this winter", datetime(2027, 1, 10, tzinfo=SHANGHAI), ("2026-12-01", "2027-01-10")),
    ],
)
def test_a_season_is_its_three_months(text: str, now: datetime, expected: tuple[str, str]) -> None:
    found = find_window(text, now)
    assert found is not None and (f"{found.start:%Y-%m-%d}", f"{found.end:%Y-%m-%d}") == expected
