"""What a chat prompt says about time: the user's "now", and when each memory is from.

The rules: docs/development/design-rules.md#time.

The rules (which plan is past, which state has ended) are pure functions in `knowledge/rules/temporal.py`;
this module only words them, in English like the rest of the prompt's instructions (the model answers
in the user's language). Every date is read in the user's time zone, which `TurnTime.now` carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from knowledge.dates.moments import is_all_day
from knowledge.dates.windows import TimeWindow
from knowledge.journal.ongoing_threads import OngoingThread
from knowledge.records import MemoryRecord
from knowledge.rules.chapters import chapter_label
from knowledge.rules.decay import MemoryPolicy
from knowledge.rules.temporal import episode_moment, has_ended, plan_stage, without_stamp

# A gap shorter than this within one conversation is not worth a line of the prompt.
NOTABLE_SILENCE = timedelta(hours=2)


@dataclass(frozen=True, slots=True)
class TurnTime:
    """The time of one turn, as the user lives it."""

    now: datetime  # when the message was sent, in the user's time zone
    previous: datetime | None  # the user's previous message to this persona, anywhere; None: the first ever
    new_conversation: bool  # the first message of a fresh conversation (after /new or an idle close)
    conversation_start: datetime  # when the current conversation's first message was sent
    window: TimeWindow | None = None  # the time the message names ("yesterday", "上次"), if any


def part_of_day(moment: datetime) -> str:
    """ "morning", "afternoon", "evening" or "night" for a local moment."""
    hour = moment.hour
    if 5 <= hour < 12:
        return "morning"
    if 12 <= hour < 17:
        return "afternoon"
    if 17 <= hour < 22:
        return "evening"
    return "night"


def _count(number: int, unit: str) -> str:
    return f"{number} {unit}{'' if number == 1 else 's'}"


def duration(span: timedelta) -> str:
    """A span in the largest unit that fits: "5 minutes", "3 hours", "2 days", "3 weeks", "4 months"."""
    minutes = int(span.total_seconds() // 60)
    if minutes < 60:
        return _count(max(minutes, 1), "minute")
    if minutes < 48 * 60:
        return _count(minutes // 60, "hour")
    days = span.days
    if days < 14:
        return _count(days, "day")
    if days < 60:
        return _count(days // 7, "week")
    if days < 730:
        return _count(days // 30, "month")
    return _count(days // 365, "year")


def now_section(when: TurnTime, title: str) -> str:
    """The prompt's "now": the user's local date, weekday and time, and their silence when it matters."""
    now = when.now
    lines = [f"{now:%A} {now.day} {now:%B %Y}, {now:%H:%M} ({part_of_day(now)}) where {title} is."]
    if when.previous is None:
        lines.append(f"This is the first time {title} writes to you.")
    else:
        gap = duration(now - when.previous)
        if when.new_conversation:
            lines.append(f"A new conversation; {title}'s previous message was {gap} ago.")
        elif now - when.previous >= NOTABLE_SILENCE:
            lines.append(f"{title}'s previous message was {gap} ago.")
    return "## Now\n" + " ".join(lines)


def threads_lines(threads: Sequence[OngoingThread], now: datetime, title: str) -> str:
    """What is going on in the user's life now, for the Now section: each thread since when, and its latest news
    with how long ago it came."""
    if not threads:
        return ""
    lines = [f"Going on in {title}'s life now:"]
    for thread in threads:
        latest = f"; latest, {relative_day(thread.updated_at, now)}: {thread.news}" if thread.news else ""
        lines.append(f"- {thread.title} (since {short_date(thread.since, now)}{latest})")
    return "\n".join(lines)


def short_date(moment: datetime, now: datetime) -> str:
    """A compact date: "3 Jan" this year, "Jan 2025" before."""
    local = moment.astimezone(now.tzinfo)
    return f"{local.day} {local:%b}" if local.year == now.year else f"{local:%b %Y}"


def calendar_date(moment: datetime, now: datetime) -> str:
    """A plan's date: "Mon 30 Nov", with its time if it has one ("Mon 30 Nov 10:00"), and its year if not now's."""
    local = moment.astimezone(now.tzinfo)
    text = f"{local:%a} {local.day} {local:%b}" + ("" if local.year == now.year else f" {local.year}")
    return text if is_all_day(local) else f"{text} {local:%H:%M}"


def relative_day(moment: datetime, now: datetime) -> str:
    """When a past moment was, relative to now: "this morning", "yesterday evening", "on Tuesday",
    "last Friday", "10 days ago", "3 weeks ago"."""
    local = moment.astimezone(now.tzinfo)
    days = (now.date() - local.date()).days
    if days <= 0:
        return "earlier today" if part_of_day(local) == "night" else f"this {part_of_day(local)}"
    if days == 1:
        return "last night" if part_of_day(local) == "night" else f"yesterday {part_of_day(local)}"
    if days < 7:
        same_week = local.isocalendar()[:2] == now.isocalendar()[:2]
        return f"{'on' if same_week else 'last'} {local:%A}"
    return f"{duration(timedelta(days=days))} ago"


def relative_ahead(moment: datetime, now: datetime) -> str:
    """When a coming moment is: "today", "tomorrow", "in 4 days", "in 3 weeks"."""
    days = (moment.astimezone(now.tzinfo).date() - now.date()).days
    if days <= 0:
        return "today"
    if days == 1:
        return "tomorrow"
    return f"in {duration(timedelta(days=days))}"


def memory_line(record: MemoryRecord, when: TurnTime, policy: MemoryPolicy) -> str:
    """A memory as the prompt lists it, with its time: "- [3 Jan] 主人喜欢拉面", "- [yesterday evening] …"."""
    now = when.now
    if record.category == "system":
        return f"- {record.content}"
    if record.category == "episode":
        return f"- [{relative_day(episode_moment(record), now)}] {without_stamp(record.content)}"
    if record.category == "chapter":
        return f"- [{chapter_label(record, now.tzinfo or UTC)}] {record.content}"
    if record.until is not None and has_ended(record, now):  # only a changed fact's old value is still shown
        return f"- [used to be true, until {short_date(record.until, now)}] {record.content}"
    notes = []
    stage = plan_stage(record, now, policy)
    if record.about is not None and stage == "upcoming":
        notes.append(f"coming up: {calendar_date(record.about, now)}, {relative_ahead(record.about, now)}")
    elif record.about is not None:  # a plan whose date has passed, or an event
        day = calendar_date(record.about, now)
        notes.append(f"was {day}, now past" if stage else f"on {day}")
    if record.until is not None:
        notes.append(f"until {calendar_date(record.until, now)}")
    suffix = f" ({'; '.join(notes)})" if notes else ""
    return f"- [{short_date(record.dated, now)}] {record.content}{suffix}"
