"""Chapters: the story of a stretch of time, kept after its episodes expire, as pure functions of time.

The rule: docs/concepts/memory.md#chapters.

A chapter covers a window of the user's local time: a week, a month or a year. Weeks are cut inside
their month (days 1-7, 8-14, 15-21, 22-28, 29 to the end), so each week folds into exactly one month
and each month into one year. A window is folded once it has been over for `FOLD_DELAY` (its
conversations have gone quiet and become episodes by then): a week at most eight days after its
first episode, well before episodes expire at fourteen. What is due is worked out from what is stored
(the moments there was something to fold, the chapters written), so a pass after downtime catches up
every window missed, and a window whose chapter a forget deleted is written again from what is left.
"""

from __future__ import annotations

from calendar import month_name
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Literal

from knowledge.records import MemoryRecord, Scope, derived_memory_id

Span = Literal["week", "month", "year"]
SPANS: tuple[Span, ...] = ("week", "month", "year")  # finer first: each folds into the next
FOLD_DELAY = timedelta(days=1)  # a window is folded this long after it ended
WEEK_STARTS = (1, 8, 15, 22, 29)  # the days of a month its weeks start on


@dataclass(frozen=True, slots=True)
class ChapterWindow:
    """One week, month or year of local time; `end` is exclusive."""

    span: Span
    start: datetime
    end: datetime

    @property
    def label(self) -> str:
        """How the prompt names it: "1–7 January 2027", "January 2027", "2027"."""
        return window_label(self.span, self.start, self.end)

    def chapter_id(self, scope: Scope) -> str:
        """The id of this window's chapter in `scope`: the same every time, so a re-run finds what it wrote."""
        return derived_memory_id("chapter", scope.persona_id, scope.user_id, self.span, self.start.date().isoformat())

    def contains(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


def window_label(span: Span, start: datetime, end: datetime) -> str:
    """A window's name in the prompt and in `/memory`."""
    if span == "year":
        return f"{start.year}"
    if span == "month":
        return f"{month_name[start.month]} {start.year}"
    last = end - timedelta(days=1)
    return f"{start.day}–{last.day} {month_name[start.month]} {start.year}"


def _local_midnight(day: date, zone: tzinfo) -> datetime:
    return datetime.combine(day, time(), tzinfo=zone)


def _next_month(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


def window_of(span: Span, moment: datetime, zone: tzinfo) -> ChapterWindow:
    """The week, month or year (in `zone`) that `moment` falls in."""
    day = moment.astimezone(zone).date()
    if span == "year":
        first, after = date(day.year, 1, 1), date(day.year + 1, 1, 1)
    elif span == "month":
        first, after = day.replace(day=1), _next_month(day)
    else:
        start_day = max(start for start in WEEK_STARTS if start <= day.day)
        first = day.replace(day=start_day)
        after = _next_month(day) if start_day == WEEK_STARTS[-1] else first + timedelta(days=7)
    return ChapterWindow(span, _local_midnight(first, zone), _local_midnight(after, zone))


def parent_span(span: Span) -> Span | None:
    """The span a chapter of `span` folds into; None for a year."""
    index = SPANS.index(span)
    return SPANS[index + 1] if index + 1 < len(SPANS) else None


def chapter_window(record: MemoryRecord) -> tuple[datetime, datetime] | None:
    """The window a stored chapter covers (`about` to `until`); None for any other memory."""
    if record.category != "chapter" or record.about is None or record.until is None:
        return None
    return record.about, record.until


def chapter_span(record: MemoryRecord) -> Span:
    """Whether a stored chapter is a week's, a month's or a year's, told by the length of its window."""
    days = window_length(record).days
    return "week" if days <= 8 else "month" if days <= 31 else "year"


def chapter_label(record: MemoryRecord, zone: tzinfo) -> str:
    """A stored chapter's window by name, in the user's zone."""
    start, end = chapter_window(record) or (record.created_at, record.created_at)
    return window_label(chapter_span(record), start.astimezone(zone), end.astimezone(zone))


def due_windows(
    material: Iterable[datetime], written: Iterable[MemoryRecord], now: datetime, zone: tzinfo
) -> list[ChapterWindow]:
    """The windows to fold now, finer and earlier first: every week, month and year that has something to
    fold (a moment in `material`: when a message was sent) and no chapter in `written` yet, once it has been
    over for `FOLD_DELAY`. Weeks come before their month, so a month's job finds its weeks written."""
    have = {(chapter_span(record), record.about) for record in written if chapter_window(record)}
    moments = list(material)
    due: list[ChapterWindow] = []
    for span in SPANS:
        windows = {window_of(span, moment, zone) for moment in moments}
        due += sorted(
            (window for window in windows if window.end + FOLD_DELAY <= now and (span, window.start) not in have),
            key=lambda window: window.start,
        )
    return due


def inside(record: MemoryRecord, start: datetime, end: datetime) -> bool:
    """Whether a chapter's window lies within [start, end) (a week's within its month)."""
    window = chapter_window(record)
    return window is not None and start <= window[0] and window[1] <= end


def window_length(record: MemoryRecord) -> timedelta:
    """How long a chapter's window is (zero for any other memory)."""
    start, end = chapter_window(record) or (record.created_at, record.created_at)
    return end - start


def overlaps(record: MemoryRecord, start: datetime, end: datetime) -> bool:
    """Whether a chapter's window and [start, end) share any time."""
    window = chapter_window(record)
    return window is not None and window[0] < end and start < window[1]
