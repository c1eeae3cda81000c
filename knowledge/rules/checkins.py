"""The rules of check-ins (the companion writing first) as pure functions of time and records.

Beside `temporal.py` and `decay.py`: nothing here reads a store or a clock, so every rule and every
number is tested in milliseconds on a fake clock. Times are compared in the user's zone.

What is worth a check-in (each rule gives a `Due`: when to write, and when it is too late):

- **plan_passed**: a plan of the user's (a fact or core memory about a moment after it was learned)
  whose moment is over: "how did the interview go?", `plan_delay` after it ended, in the user's
  daytime; stale once the day after the plan's day is over (a Monday plan is asked about on Monday
  afternoon or on Tuesday, never later).
- **kept_date**: a date the companion keeps, a *core* memory about a day of an earlier year (a
  birthday, an anniversary: "主人的生日是 1990-05-12"), on that day every year (29 February on
  28 February in other years), in the user's daytime; stale at the day's end.
- **long_silence**: the user was active (wrote on `active_days` different days of the
  `active_window_days` before their last message) and then silent for `silence_days`: once, in
  their daytime; stale a day later. The check-in is tied to that last message, so it never comes
  again until the user writes.

Manners (`verdict`, checked again right before sending): consent, never in quiet hours, never while a
conversation is active, at most `max_per_day` a day, none after `max_unanswered` unanswered ones.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Literal

from knowledge.records import MemoryRecord
from knowledge.rules.temporal import ends

Rule = Literal["plan_passed", "kept_date", "long_silence"]
RULES: tuple[Rule, ...] = ("plan_passed", "kept_date", "long_silence")
_DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class CheckinPolicy:
    """Every number of the check-in rules and manners; the operator sets them (`[checkins]`)."""

    quiet_start: time = time(22, 0)  # the user's night, in their zone: no check-in from here ...
    quiet_end: time = time(9, 0)  # ... to here
    max_per_day: int = 1
    max_unanswered: int = 2  # after this many unanswered check-ins, none until the user writes
    conversation_active: timedelta = timedelta(minutes=30)  # a message this recent: a conversation is on
    plan_delay: timedelta = timedelta(hours=2)  # how long after a plan ended the companion asks how it went
    silence_days: float = 4.0
    active_days: int = 3  # the user wrote on at least this many different days ...
    active_window_days: int = 7  # ... of this many before they fell silent
    silence_grace: timedelta = timedelta(days=1)  # a silence check-in not sent by then is dropped

    def __post_init__(self) -> None:
        if self.max_per_day < 1 or self.max_unanswered < 1:
            raise ValueError("max_per_day and max_unanswered must be at least 1 (turn check-ins off instead)")
        if self.silence_days <= 0 or self.active_days < 1 or self.active_window_days < self.active_days:
            raise ValueError("silence_days must be positive and active_days at most active_window_days")

    @property
    def silence(self) -> timedelta:
        return timedelta(days=self.silence_days)


@dataclass(frozen=True, slots=True)
class Due:
    """A check-in a rule asks for: when to write (`due_at`), and when it is too late (`stale_at`)."""

    rule: Rule
    due_at: datetime
    stale_at: datetime
    occasion: datetime  # what it is about: the plan's moment, this year's date, the user's last message
    memory_id: str | None = None  # the memory that triggered it (none for a silence)


def in_quiet_hours(moment: datetime, zone: tzinfo, policy: CheckinPolicy) -> bool:
    """Whether `moment` is in the user's night (quiet hours may wrap midnight: 22:00-09:00)."""
    clock = moment.astimezone(zone).time()
    start, end = policy.quiet_start, policy.quiet_end
    if start == end:
        return False
    return (clock >= start or clock < end) if start > end else start <= clock < end


def daytime_from(moment: datetime, zone: tzinfo, policy: CheckinPolicy) -> datetime:
    """The first moment at or after `moment` outside the user's quiet hours."""
    if not in_quiet_hours(moment, zone, policy):
        return moment
    local = moment.astimezone(zone)
    morning = datetime.combine(local.date(), policy.quiet_end, tzinfo=zone)
    if morning <= local:
        morning = datetime.combine(local.date() + _DAY, policy.quiet_end, tzinfo=zone)
    return morning


def _midnight(day: date, zone: tzinfo) -> datetime:
    return datetime.combine(day, time(0), tzinfo=zone)


def _due(
    rule: Rule,
    earliest: datetime,
    stale_at: datetime,
    occasion: datetime,
    zone: tzinfo,
    policy: CheckinPolicy,
    memory_id: str | None = None,
) -> Due | None:
    """A check-in due at the first daytime moment from `earliest`; None if that is already too late."""
    due_at = daytime_from(earliest, zone, policy)
    return Due(rule, due_at, stale_at, occasion, memory_id) if due_at < stale_at else None


def plan_passed(record: MemoryRecord, now: datetime, zone: tzinfo, policy: CheckinPolicy) -> Due | None:
    """A plan whose moment is over: ask how it went (None: no plan, not over yet, or too long ago)."""
    if record.about is None or record.category not in ("fact", "core") or record.replaced_by is not None:
        return None
    over = ends(record.about, record.about.astimezone(zone))
    if record.created_at >= over or now < over:
        return None  # an event learned afterwards, or a plan still to come
    stale_at = _midnight(record.about.astimezone(zone).date() + 2 * _DAY, zone)  # through the next day
    return _due("plan_passed", over + policy.plan_delay, stale_at, record.about, zone, policy, record.id)


def same_day_of_year(day: date, today: date) -> bool:
    """Whether `today` is `day`'s anniversary (29 February's is 28 February in other years)."""
    if (day.month, day.day) == (today.month, today.day):
        return True
    leap_day = (day.month, day.day) == (2, 29) and not calendar.isleap(today.year)
    return leap_day and (today.month, today.day) == (2, 28)


def kept_date(record: MemoryRecord, now: datetime, zone: tzinfo, policy: CheckinPolicy) -> Due | None:
    """A core memory about a day of an earlier year whose anniversary is today (a birthday, an anniversary)."""
    if record.about is None or record.category != "core" or record.replaced_by is not None:
        return None
    today = now.astimezone(zone).date()
    day = record.about.astimezone(zone).date()
    if day.year >= today.year or not same_day_of_year(day, today):
        return None
    start = _midnight(today, zone)
    return _due("kept_date", start, start + _DAY, start, zone, policy, record.id)


def anniversary_keys(today: date) -> list[str]:
    """The month-days (`MM-DD`, of a moment in UTC) a memory kept for `today` may be stored under: a local
    day is the UTC day before, the same or after, and 29 February is kept on 28 February in other years."""
    days = [today - _DAY, today, today + _DAY]
    keys = [f"{day:%m-%d}" for day in days]
    if (today.month, today.day) == (2, 28) and not calendar.isleap(today.year):
        keys.append("02-29")
    return keys


def long_silence(
    last_message_at: datetime, active_days: int, now: datetime, zone: tzinfo, policy: CheckinPolicy
) -> Due | None:
    """An active user silent for `silence_days`: once, tied to their last message (None: not active enough,
    not silent long enough, or too late)."""
    if active_days < policy.active_days or now - last_message_at < policy.silence:
        return None
    earliest = last_message_at + policy.silence
    return _due("long_silence", earliest, earliest + policy.silence_grace, last_message_at, zone, policy)


def silence_bounds(now: datetime, policy: CheckinPolicy) -> tuple[datetime, datetime]:
    """The last messages whose silence may be due now: from `silence + grace` ago to `silence` ago (earlier
    ones are stale, later ones not yet silent long enough)."""
    return now - policy.silence - policy.silence_grace, now - policy.silence


@dataclass(frozen=True, slots=True)
class Standing:
    """What is known of the user right before a check-in is sent."""

    consent: bool
    last_message_at: datetime | None  # the newest message of the private conversation (either side)
    unanswered: int  # check-ins sent since the user last wrote
    sent_today: int  # check-ins sent since the user's local midnight


@dataclass(frozen=True, slots=True)
class Verdict:
    """Send now, wait until `later`, or drop it for `reason`."""

    action: Literal["send", "later", "drop"]
    later: datetime | None = None
    reason: str = ""


SEND = Verdict("send")


def verdict(
    due_at: datetime, stale_at: datetime, now: datetime, zone: tzinfo, policy: CheckinPolicy, standing: Standing
) -> Verdict:
    """Whether a check-in may go out now (the manners), checked right before it is written and sent."""
    if not standing.consent:
        return Verdict("drop", reason="check-ins are off")
    if standing.unanswered >= policy.max_unanswered:
        return Verdict("drop", reason=f"{standing.unanswered} check-ins unanswered")
    later = daytime_from(max(now, due_at), zone, policy)
    if standing.last_message_at is not None:
        later = max(later, standing.last_message_at + policy.conversation_active)  # a conversation is on
    if standing.sent_today >= policy.max_per_day:
        later = max(later, _midnight(now.astimezone(zone).date() + _DAY, zone))
    later = daytime_from(later, zone, policy)
    if later >= stale_at:
        return Verdict("drop", reason="stale")
    return SEND if later <= now else Verdict("later", later=later)


def local_midnight(now: datetime, zone: tzinfo) -> datetime:
    """The start of the user's day."""
    return _midnight(now.astimezone(zone).date(), zone)
