"""Time named in a message ("yesterday", "last week", "上次", "三天前"), as a window of the user's local time.

The window is computed by code in the user's time zone, never by the model (docs/development/design-rules.md#time).
A small grammar of English and Chinese expressions covers what people say when they ask about the
past; each is a pure function of (text, now). Only the past is recalled: "next Monday" names no window.

dateparser was measured for this and not used: it has no notion of a window, misses 三天前, 上周五 and
上次, finds a date in "we", and took 1-200 ms a call where this takes microseconds.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

__all__ = ["TimeWindow", "find_window"]


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """A stretch of local time a message asks about; `end` is exclusive.

    `last_time` marks "last time" / "上次": the conversation before the current one, wherever it was,
    so the window is everything before now and the caller takes the latest.
    """

    start: datetime
    end: datetime
    phrase: str
    last_time: bool = False

    def __contains__(self, moment: datetime) -> bool:
        return self.start <= moment < self.end

    def utc(self) -> TimeWindow:
        """The same window with UTC bounds: UTC moments (as stored) compare against it several times faster."""
        return TimeWindow(_as_utc(self.start), _as_utc(self.end), self.phrase, self.last_time)


def _as_utc(moment: datetime) -> datetime:
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # the beginning of time east of Greenwich, or its end west of it
        return (datetime.min if moment.year == datetime.min.year else datetime.max).replace(tzinfo=UTC)


_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
}
_FEW = ("a few", "several", "几", "前几")  # "a few days ago": a range, not one day
_WEEKDAYS_EN = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAYS_ZH = "一二三四五六日"  # 周日 / 星期天 both end the week
_MONTHS_EN = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_PARTS = {  # part of a day: (start hour, end hour); the night runs into the next morning
    "morning": (5, 12),
    "afternoon": (12, 18),
    "evening": (17, 24),
    "night": (18, 30),
    "早上": (5, 12),
    "上午": (5, 12),
    "中午": (11, 14),
    "下午": (12, 18),
    "晚上": (17, 24),
    "晚": (17, 30),
    "夜": (18, 30),
}


def _number(text: str) -> int | None:
    """1, "three", "三", "十二", "二十"; None for words that are not a count."""
    text = text.strip().lower()
    if text.isdigit():
        return int(text)
    if text in _WORDS:
        return _WORDS[text]
    if text and all(char in _DIGITS or char == "十" for char in text):
        if "十" not in text:
            return int("".join(str(_DIGITS[char]) for char in text))
        tens, _, units = text.partition("十")
        return (_DIGITS[tens] if tens else 1) * 10 + (_DIGITS[units] if units else 0)
    return None


# -- windows ---------------------------------------------------------------------------------------


def _midnight(day: date, now: datetime) -> datetime:
    return datetime.combine(day, time(0), tzinfo=now.tzinfo)


def _days(first: date, count: int, now: datetime) -> tuple[datetime, datetime]:
    return _midnight(first, now), _midnight(first + timedelta(days=count), now)


def _part_of_day(day: date, part: str | None, now: datetime) -> tuple[datetime, datetime]:
    if not part:
        return _days(day, 1, now)
    start, end = _PARTS[part]
    return _midnight(day, now) + timedelta(hours=start), _midnight(day, now) + timedelta(hours=end)


def _week_of(day: date, now: datetime) -> tuple[datetime, datetime]:
    return _days(day - timedelta(days=day.weekday()), 7, now)


def _month_of(year: int, month: int, now: datetime) -> tuple[datetime, datetime]:
    index = year * 12 + month - 1
    return _month_start(index, now), _month_start(index + 1, now)


def _latest_month(month: int, now: datetime, years_back: int = 0) -> tuple[datetime, datetime]:
    """The month `month` most recently begun (this year's if it has started), `years_back` years earlier."""
    year = now.year if month <= now.month else now.year - 1
    return _month_of(year - years_back, month, now)


def _latest_weekday(weekday: int, now: datetime) -> date:
    """The most recent such weekday before today (today is not "on Monday" when today is Monday)."""
    back = (now.weekday() - weekday) % 7 or 7
    return now.date() - timedelta(days=back)


def _month_start(index: int, now: datetime) -> datetime:
    """The first moment of month number `index` (year * 12 + month - 1)."""
    return _midnight(date(index // 12, index % 12 + 1, 1), now)


def _ago(count: int, unit: str, now: datetime, few: bool) -> tuple[datetime, datetime]:
    """N units ago, as the whole unit it falls in; "a few" is 2 to 6 of them."""
    oldest, newest = (6, 2) if few else (count, count)
    today = now.date()
    if unit in ("day", "天", "日"):
        return _midnight(today - timedelta(days=oldest), now), _midnight(today - timedelta(days=newest - 1), now)
    if unit in ("week", "周", "星期", "礼拜"):
        return _week_of(today - timedelta(weeks=oldest), now)[0], _week_of(today - timedelta(weeks=newest), now)[1]
    if unit in ("year", "年"):
        return _month_start((now.year - oldest) * 12, now), _month_start((now.year - newest + 1) * 12, now)
    this_month = now.year * 12 + now.month - 1
    return _month_start(this_month - oldest, now), _month_start(this_month - newest + 1, now)


# The meteorological seasons of the northern hemisphere, by the month each starts in (winter runs into the next year).
_SEASON_STARTS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12, "春": 3, "夏": 6, "秋": 9, "冬": 12}


def _season(year: int, season: str, now: datetime) -> tuple[datetime, datetime]:
    """The three months of a season that starts in `year`."""
    first = year * 12 + _SEASON_STARTS[season] - 1
    return _month_start(first, now), _month_start(first + 3, now)


def _latest_season(season: str, now: datetime, *, this: bool) -> tuple[datetime, datetime]:
    """ "this summer": the latest one begun; "last summer": the latest one begun before the current season."""
    current = _month_start(now.year * 12 + now.month - 1 - now.month % 3, now)  # the current season's first day
    before = now if this else current
    year = now.year
    while (window := _season(year, season, now))[0] > before or (not this and window[0] == before):
        year -= 1
    return window


# -- the grammar -----------------------------------------------------------------------------------

Rule = tuple[re.Pattern[str], Callable[[re.Match[str], datetime], tuple[datetime, datetime] | None]]
_EN = re.IGNORECASE
_UNIT_EN = r"(?P<unit>day|week|month|year)s?"
_COUNT_EN = (
    r"(?P<count>\d+|a couple of|a few|several|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
)
_UNIT_ZH = r"(?P<unit>天|日|周|星期|礼拜|年)|(?P<months>个月|個月)"
_COUNT_ZH = r"(?P<count>\d+|[一二两三四五六七八九十]+|几)"
_LAST_TIME = re.compile(
    r"\b(?:the\s+)?last\s+time\b|\b(?:our\s+)?last\s+(?:conversation|chat|talk)\b|上一?次|上回", _EN
)


def _month_rule(match: re.Match[str], now: datetime) -> tuple[datetime, datetime]:
    month = _MONTHS_EN.index(match["month"].lower()) + 1
    return _latest_month(month, now, 1 if match["last"] else 0)


def _zh_month_rule(match: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    month = _number(match["month"])
    if month is None or not 1 <= month <= 12:
        return None
    if match["year"]:
        return _month_of(now.year - 1, month, now)
    return _latest_month(month, now)


def _ago_rule(match: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    raw = match["count"].lower()
    few = raw in _FEW
    count = 1 if few else _number(raw)
    if count is None or count > 100:
        return None
    unit = "month" if match.groupdict().get("months") else match["unit"].lower()
    return _ago(count, unit, now, few)


_RULES: list[Rule] = [
    (re.compile(r"\bthe\s+day\s+before\s+yesterday\b", _EN), lambda m, now: _days(now.date() - timedelta(2), 1, now)),
    (
        re.compile(r"\byesterday(?:\s+(?P<part>morning|afternoon|evening|night))?\b", _EN),
        lambda m, now: _part_of_day(now.date() - timedelta(1), m["part"] and m["part"].lower(), now),
    ),
    (re.compile(r"\blast\s+night\b", _EN), lambda m, now: _part_of_day(now.date() - timedelta(1), "night", now)),
    (
        re.compile(r"\b(?:earlier\s+)?today\b|\bthis\s+(?P<part>morning|afternoon)\b", _EN),
        lambda m, now: _part_of_day(now.date(), m["part"] and m["part"].lower(), now),
    ),
    (re.compile(r"\blast\s+week(?:end)?\b", _EN), lambda m, now: _week_of(now.date() - timedelta(weeks=1), now)),
    (re.compile(r"\bthis\s+week\b", _EN), lambda m, now: _week_of(now.date(), now)),
    (
        re.compile(r"\blast\s+month\b", _EN),
        lambda m, now: _ago(1, "month", now, few=False),
    ),
    (re.compile(r"\bthis\s+month\b", _EN), lambda m, now: _month_of(now.year, now.month, now)),
    (re.compile(r"\blast\s+year\b", _EN), lambda m, now: _ago(1, "year", now, few=False)),
    (re.compile(rf"\b{_COUNT_EN}\s+{_UNIT_EN}\s+ago\b", _EN), _ago_rule),
    (
        re.compile(rf"\b(?:on\s+|last\s+|this\s+past\s+)(?P<day>{'|'.join(_WEEKDAYS_EN)})\b", _EN),
        lambda m, now: _days(_latest_weekday(_WEEKDAYS_EN.index(m["day"].lower()), now), 1, now),
    ),
    (re.compile(rf"\b(?:in\s+|(?P<last>last\s+))(?P<month>{'|'.join(_MONTHS_EN)})\b", _EN), _month_rule),
    (
        re.compile(r"\b(?P<which>last|this(?:\s+past)?)\s+(?P<season>spring|summer|autumn|fall|winter)\b", _EN),
        lambda m, now: _latest_season(m["season"].lower(), now, this=m["which"].lower() == "this"),
    ),
    # Chinese: no word boundaries; longer forms first so 大前天 is not read as 前天.
    (
        re.compile(r"(?P<year>去年|今年|前年)(?P<season>[春夏秋冬])(?:天|季)"),
        lambda m, now: _season(now.year - ("今去前".index(m["year"][0])), m["season"], now),
    ),
    (re.compile("大前天"), lambda m, now: _days(now.date() - timedelta(3), 1, now)),
    (re.compile("前天"), lambda m, now: _days(now.date() - timedelta(2), 1, now)),
    (
        re.compile(r"(?:昨天|昨日)(?P<part>早上|上午|中午|下午|晚上)?|昨(?P<night>晚|夜)"),
        lambda m, now: _part_of_day(now.date() - timedelta(1), m["part"] or m["night"], now),
    ),
    (
        re.compile(r"(?:今天|今日)(?P<part>早上|上午|中午|下午)?|今(?P<early>早)"),
        lambda m, now: _part_of_day(now.date(), m["part"] or ("早上" if m["early"] else None), now),
    ),
    (
        re.compile(rf"上(?:个)?(?:周|星期|礼拜)(?P<day>[{_WEEKDAYS_ZH}天])"),
        lambda m, now: _days(
            _week_of(now.date() - timedelta(weeks=1), now)[0].date() + timedelta(_zh_weekday(m["day"])), 1, now
        ),
    ),
    (re.compile(r"上(?:个)?(?:周|星期|礼拜)(?:末)?"), lambda m, now: _week_of(now.date() - timedelta(weeks=1), now)),
    (re.compile(r"(?:这|本)(?:个)?(?:周|星期|礼拜)"), lambda m, now: _week_of(now.date(), now)),
    (re.compile(r"上(?:个)?月"), lambda m, now: _ago(1, "month", now, few=False)),
    (re.compile(r"(?:这|本)(?:个)?月"), lambda m, now: _month_of(now.year, now.month, now)),
    (re.compile(r"(?P<year>去年)?(?P<month>\d{1,2}|十[一二]?|[一二三四五六七八九])月(?!份?前)"), _zh_month_rule),
    (re.compile("去年"), lambda m, now: _ago(1, "year", now, few=False)),
    (re.compile(rf"(?:{_COUNT_ZH}(?:{_UNIT_ZH})前)"), _ago_rule),
    (re.compile(r"前几天"), lambda m, now: _ago(1, "day", now, few=True)),
    (
        re.compile(rf"(?<![下这本个])(?:周|星期|礼拜)(?P<day>[{_WEEKDAYS_ZH}天])"),  # not 下周一: the future
        lambda m, now: _days(_latest_weekday(_zh_weekday(m["day"]), now), 1, now),
    ),
]


def _zh_weekday(char: str) -> int:
    return 6 if char in "日天" else _WEEKDAYS_ZH.index(char)


# Calendar dates ("in July 2023", "on 23 January, 2022", "2023年7月", "2026-11-30") name their window
# outright. In "last week, as mentioned on 6 November 2023" the date anchors the relative words, so
# a calendar date wins over relative ones wherever it stands.
_MONTH_EN = rf"(?P<month>{'|'.join(_MONTHS_EN)})"
_DAY_EN = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"


def _calendar(match: re.Match[str], now: datetime) -> tuple[datetime, datetime] | None:
    """The year, month or day a calendar date names; None for a date that does not exist."""
    parts = match.groupdict()
    year = int(parts["year"])
    raw_month = parts.get("month")
    if raw_month is None:
        return _month_start(year * 12, now), _month_start((year + 1) * 12, now)
    month = _MONTHS_EN.index(raw_month.lower()) + 1 if raw_month.isalpha() and raw_month.isascii() else None
    month = month or _number(raw_month)
    if month is None or not 1 <= month <= 12:
        return None
    if not parts.get("day"):
        return _month_of(year, month, now)
    try:
        return _days(date(year, month, int(parts["day"])), 1, now)
    except ValueError:
        return None


_CALENDAR_RULES: list[Rule] = [
    (re.compile(r"\b(?P<year>\d{4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})\b"), _calendar),
    (re.compile(rf"\b{_DAY_EN}\s+(?:of\s+)?{_MONTH_EN},?\s+(?P<year>\d{{4}})\b", _EN), _calendar),
    (re.compile(rf"\b{_MONTH_EN}\s+{_DAY_EN},?\s+(?P<year>\d{{4}})\b", _EN), _calendar),
    (re.compile(rf"\b{_MONTH_EN},?\s+(?P<year>\d{{4}})\b", _EN), _calendar),
    (re.compile(r"\b(?:in|during)\s+(?P<year>(?:19|20)\d{2})\b", _EN), _calendar),
    (
        re.compile(
            r"(?P<year>\d{4})年(?:(?P<month>\d{1,2}|十[一二]?|[一二三四五六七八九])月(?:(?P<day>\d{1,2})[日号])?)?"
        ),
        _calendar,
    ),
]


def _earliest(rules: list[Rule], text: str, now: datetime) -> tuple[int, TimeWindow | None] | None:
    """Where the expression matching earliest in `text` stands (the first rule wins a tie) and its window,
    None for one still to come ("in December 2027": only the past is recalled); None if nothing matches."""
    best: tuple[int, TimeWindow | None] | None = None
    for pattern, window_of in rules:
        match = pattern.search(text)
        if match is None or (best is not None and match.start() >= best[0]):
            continue
        window = window_of(match, now)
        if window is not None:
            past = window[0] < now
            best = (match.start(), TimeWindow(window[0], min(window[1], now), match[0]) if past else None)
    return best


def find_window(text: str, now: datetime) -> TimeWindow | None:
    """The first time expression in `text`, as a window of `now`'s time zone; None if it names none.

    `now` must be aware and in the user's zone: "yesterday" is the user's yesterday.
    """
    if now.tzinfo is None:
        raise ValueError("find_window needs an aware datetime in the user's time zone")
    if calendar := _earliest(_CALENDAR_RULES, text, now):
        return calendar[1]
    relative = _earliest(_RULES, text, now)
    last_time = _LAST_TIME.search(text)
    if last_time and (relative is None or relative[1] is None or last_time.start() <= relative[0]):
        return TimeWindow(datetime.min.replace(tzinfo=now.tzinfo), now, last_time[0], True)
    return None if relative is None else relative[1]
