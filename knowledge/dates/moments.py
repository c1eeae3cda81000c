"""The moment a plan, event or state end refers to ("next Monday 10:00", "明天晚上8点", "30 Nov"), by code.

The background monitor copies the user's words into an op (`[ADD about="next Monday 10:00"] …`); this
module turns them into a moment of the user's local time, so the model never does date arithmetic
(docs/development/design-rules.md#time). A date without a time of day is that day's local midnight, and counts as
the whole day (`is_all_day`). What the grammar does not read is None: the caller refuses the date
rather than guess.

Conventions: "next Monday" / 下周一 is the Monday of next week (weeks start on Monday); a bare weekday
("Friday", "on Friday", 周五) is the next one, today included; a date without a year is the one
nearest to today; "morning" is 9:00, "afternoon" 15:00, "evening" 19:00, "tonight" 21:00. Past
expressions ("last Friday", "三天前") are read as `find_window` reads them, from the window's start.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date, datetime, time, timedelta

from knowledge.dates.windows import _MONTHS_EN, _WEEKDAYS_EN, _WEEKDAYS_ZH, _number, _zh_weekday, find_window

__all__ = ["find_moment", "is_all_day"]

_EN = re.IGNORECASE
_MONTH_WORD = r"(?P<month>jan|feb|mar|apr|may|jun|jul|aug|sept?|oct|nov|dec)[a-z]*\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(?P<year>\d{4}))?"
_ZH_NUMBER = r"\d{1,2}|[一二两三四五六七八九十]+"
_PART_HOURS = {"morning": 9, "noon": 12, "afternoon": 15, "evening": 19, "night": 21, "tonight": 21}
_ZH_PART_HOURS = {"早上": 9, "早": 9, "上午": 9, "中午": 12, "下午": 15, "傍晚": 18, "晚上": 19, "晚": 19, "夜": 21}
_UNITS = {"day": 1, "天": 1, "日": 1, "week": 7, "周": 7, "星期": 7, "礼拜": 7}

DayRule = tuple[re.Pattern[str], Callable[[re.Match[str], date], date | None]]


def is_all_day(moment: datetime) -> bool:
    """Whether a moment (in the user's zone) names a whole day rather than a time: local midnight."""
    return moment.timetz().replace(tzinfo=None) == time(0)


def _nearest(month: int, day: int, today: date, year: str | None) -> date | None:
    """That day of `year`, or without a year the one nearest to today (last December, next January)."""
    try:
        if year:
            return date(int(year), month, day)
        candidates = [date(today.year + offset, month, day) for offset in (-1, 0, 1)]
    except ValueError:
        return None
    return min(candidates, key=lambda candidate: abs(candidate - today))


def _month_number(word: str) -> int:
    return next(index for index, name in enumerate(_MONTHS_EN, start=1) if name.startswith(word.lower()[:3]))


def _upcoming(weekday: int, today: date) -> date:
    """The next such weekday, today included."""
    return today + timedelta(days=(weekday - today.weekday()) % 7)


def _next_week(weekday: int, today: date) -> date:
    """That weekday in next week (weeks start on Monday)."""
    return today - timedelta(days=today.weekday()) + timedelta(weeks=1, days=weekday)


def _this_week(weekday: int, today: date) -> date:
    return today - timedelta(days=today.weekday()) + timedelta(days=weekday)


def _after(count_text: str, unit: str, today: date) -> date | None:
    count = _number(count_text)
    if count is None or count > 1000:
        return None
    unit = unit.lower().rstrip("s")
    if unit in _UNITS:
        return today + timedelta(days=count * _UNITS[unit])
    if unit in ("month", "个月", "個月"):
        index = today.year * 12 + today.month - 1 + count
        return date(index // 12, index % 12 + 1, min(today.day, 28))
    if unit in ("year", "年"):
        return date(today.year + count, today.month, min(today.day, 28))
    return None


def _first_of_next_month(today: date) -> date:
    return date(today.year + today.month // 12, today.month % 12 + 1, 1)


def _iso(match: re.Match[str], today: date) -> date | None:
    try:
        return date(int(match["year"]), int(match["month"]), int(match["day"]))
    except ValueError:
        return None


def _zh_date(match: re.Match[str], today: date) -> date | None:
    month, day = _number(match["month"]), _number(match["day"])
    if month is None or day is None or not 1 <= month <= 12:
        return None
    return _nearest(month, day, today, match["year"])


_WEEKDAY_EN = rf"(?P<weekday>{'|'.join(_WEEKDAYS_EN)})"
_NUMBER_WORDS = r"\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten"
_COUNT = rf"(?P<count>{_NUMBER_WORDS})"
_UNIT = r"(?P<unit>(?:day|week|month|year)s?)"
_WEEK_ZH = r"(?:周|星期|礼拜)"
_DAY_RULES: list[DayRule] = [
    (re.compile(r"\b(?P<year>\d{4})[-/.](?P<month>\d{1,2})[-/.](?P<day>\d{1,2})\b"), _iso),
    (
        re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH_WORD}{_YEAR}\b", _EN),
        lambda m, today: _nearest(_month_number(m["month"]), int(m["day"]), today, m["year"]),
    ),
    (
        re.compile(rf"\b{_MONTH_WORD}\s+{_DAY}{_YEAR}\b", _EN),
        lambda m, today: _nearest(_month_number(m["month"]), int(m["day"]), today, m["year"]),
    ),
    (re.compile(rf"(?:(?P<year>\d{{4}})年)?(?P<month>{_ZH_NUMBER})月(?P<day>{_ZH_NUMBER})[日号號]"), _zh_date),
    (re.compile(r"\b(?:the\s+)?day\s+after\s+tomorrow\b", _EN), lambda m, today: today + timedelta(days=2)),
    (re.compile(r"\btomorrow\b", _EN), lambda m, today: today + timedelta(days=1)),
    (re.compile(r"\b(?:today|tonight|this\s+(?:morning|afternoon|evening))\b", _EN), lambda m, today: today),
    (
        re.compile(rf"\bnext\s+{_WEEKDAY_EN}\b", _EN),
        lambda m, today: _next_week(_WEEKDAYS_EN.index(m["weekday"].lower()), today),
    ),
    (
        re.compile(rf"\b(?:(?:this|on|coming)\s+)?(?<!last\s){_WEEKDAY_EN}\b", _EN),
        lambda m, today: _upcoming(_WEEKDAYS_EN.index(m["weekday"].lower()), today),
    ),
    (re.compile(r"\bnext\s+week\b", _EN), lambda m, today: _next_week(0, today)),
    (re.compile(r"\b(?:this\s+|the\s+)?weekend\b", _EN), lambda m, today: _upcoming(5, today)),
    (re.compile(r"\bnext\s+month\b", _EN), lambda m, today: _first_of_next_month(today)),
    (re.compile(r"\bnext\s+year\b", _EN), lambda m, today: date(today.year + 1, 1, 1)),
    (
        re.compile(
            rf"\bin\s+{_COUNT}\s+{_UNIT}\b|\b(?P<later_count>{_NUMBER_WORDS})\s+"
            rf"(?P<later_unit>(?:day|week|month|year)s?)\s+(?:from\s+now|later)\b",
            _EN,
        ),
        lambda m, today: _after(m["count"] or m["later_count"], m["unit"] or m["later_unit"], today),
    ),
    (re.compile("大后天"), lambda m, today: today + timedelta(days=3)),
    (re.compile("后天"), lambda m, today: today + timedelta(days=2)),
    (re.compile(r"明(?:天|日|早|晚)"), lambda m, today: today + timedelta(days=1)),
    (re.compile(r"今(?:天|日|早|晚)"), lambda m, today: today),
    (
        re.compile(rf"下(?:个)?{_WEEK_ZH}(?P<weekday>[{_WEEKDAYS_ZH}天])"),
        lambda m, today: _next_week(_zh_weekday(m["weekday"]), today),
    ),
    (
        re.compile(rf"(?:这|本)(?:个)?{_WEEK_ZH}(?P<weekday>[{_WEEKDAYS_ZH}天])"),
        lambda m, today: _this_week(_zh_weekday(m["weekday"]), today),
    ),
    (
        re.compile(rf"(?<![上个])(?:{_WEEK_ZH})(?P<weekday>[{_WEEKDAYS_ZH}天])"),
        lambda m, today: _upcoming(_zh_weekday(m["weekday"]), today),
    ),
    (re.compile(rf"下(?:个)?{_WEEK_ZH}"), lambda m, today: _next_week(0, today)),
    (re.compile(r"(?:这个?|本)?周末"), lambda m, today: _upcoming(5, today)),
    (re.compile(r"下(?:个)?月"), lambda m, today: _first_of_next_month(today)),
    (re.compile("明年"), lambda m, today: date(today.year + 1, 1, 1)),
    (
        re.compile(rf"(?P<count>{_ZH_NUMBER})(?P<unit>天|日|周|星期|礼拜|个月|個月|年)(?:后|後|之后|以后)"),
        lambda m, today: _after(m["count"], m["unit"], today),
    ),
]

_CLOCK_EN = re.compile(
    r"\b(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<half>a\.?m\.?|p\.?m\.?)(?![a-z])"
    r"|\b(?P<hour24>\d{1,2}):(?P<minute24>\d{2})\b|\bat\s+(?P<hour_at>\d{1,2})\b(?![:/.-])",
    _EN,
)
_CLOCK_ZH = re.compile(
    rf"(?P<part>早上|上午|中午|下午|傍晚|晚上|凌晨|晚|早)?(?P<hour>{_ZH_NUMBER})[点點时](?:(?P<half>半)|(?P<minute>\d{{1,2}})分?)?"
)
_AFTERNOON_ON = ("afternoon", "evening", "night", "tonight", "下午", "傍晚", "晚上", "晚")  # "at 8" is 20:00
_PART_EN = re.compile(r"\b(?P<part>morning|noon|afternoon|evening|night|tonight)\b", _EN)
_PART_ZH = re.compile(r"(?P<part>早上|上午|中午|下午|傍晚|晚上)|[今明昨](?P<short>早|晚)|(?P<night>夜)")


def _clock(text: str) -> time | None:
    """The time of day a text names: 10:00, 3pm, 3:30 p.m., 下午3点, 晚上八点半, "evening"; None if none."""
    part = _PART_EN.search(text)
    if match := _CLOCK_EN.search(text):
        hour = int(match["hour"] or match["hour24"] or match["hour_at"])
        minute = int(match["minute"] or match["minute24"] or 0)
        half = (match["half"] or "").lower().replace(".", "")
        if half:
            hour = hour % 12 + (12 if half == "pm" else 0)
        elif match["hour_at"] and part and part["part"].lower() in _AFTERNOON_ON and hour < 12:
            hour += 12
        return time(hour, minute) if hour < 24 and minute < 60 else None
    if match := _CLOCK_ZH.search(text):
        named = _number(match["hour"])
        minute = 30 if match["half"] else int(match["minute"] or 0)
        if named is None:
            return None
        hour = named + 12 if match["part"] in _AFTERNOON_ON and named < 12 else named
        return time(hour, minute) if hour < 24 and minute < 60 else None
    if match := part:
        return time(_PART_HOURS[match["part"].lower()])
    if match := _PART_ZH.search(text):
        return time(_ZH_PART_HOURS[match["part"] or match["short"] or match["night"]])
    return None


def _day(text: str, today: date) -> date | None:
    """The day of the expression matching earliest in `text` (the first rule wins a tie)."""
    best: tuple[int, date] | None = None
    for pattern, day_of in _DAY_RULES:
        match = pattern.search(text)
        if match is None or (best is not None and match.start() >= best[0]):
            continue
        day = day_of(match, today)
        if day is not None:
            best = (match.start(), day)
    return None if best is None else best[1]


def find_moment(text: str, now: datetime) -> datetime | None:
    """The moment `text` names, in `now`'s time zone; a day without a time is its local midnight.

    `now` must be aware and in the user's zone: "tomorrow 10:00" is the user's tomorrow.
    """
    if now.tzinfo is None:
        raise ValueError("find_moment needs an aware datetime in the user's time zone")
    today = now.date()
    day = _day(text, today)
    if day is None and (past := find_window(text, now)) is not None and not past.last_time:
        day = past.start.date()
    clock = _clock(text)
    if day is None:
        if clock is None:
            return None
        # a time alone: today's, or tomorrow's once it has passed
        day = today if clock >= now.timetz().replace(tzinfo=None) else today + timedelta(days=1)
    return datetime.combine(day, clock or time(0), tzinfo=now.tzinfo)
