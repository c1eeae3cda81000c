"""The check-in rules and manners as pure functions of time: quiet hours, kept dates, the verdict."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from knowledge.records import MemoryRecord, Scope
from knowledge.rules.checkins import (
    CheckinPolicy,
    Standing,
    anniversary_keys,
    daytime_from,
    in_quiet_hours,
    kept_date,
    long_silence,
    same_day_of_year,
    verdict,
)

SHANGHAI = ZoneInfo("Asia/Shanghai")
POLICY = CheckinPolicy()


def at(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 3, day, hour, minute, tzinfo=SHANGHAI)


def test_quiet_hours_wrap_midnight_in_the_users_zone() -> None:
    assert in_quiet_hours(at(2, 23), SHANGHAI, POLICY) and in_quiet_hours(at(3, 8, 59), SHANGHAI, POLICY)
    assert not in_quiet_hours(at(3, 9), SHANGHAI, POLICY) and not in_quiet_hours(at(3, 21, 59), SHANGHAI, POLICY)
    assert daytime_from(at(2, 23), SHANGHAI, POLICY) == at(3, 9)
    assert daytime_from(at(3, 2), SHANGHAI, POLICY) == at(3, 9)
    assert daytime_from(at(3, 15), SHANGHAI, POLICY) == at(3, 15)
    # 22:00-09:00 in Shanghai is 14:00-01:00 UTC: a UTC afternoon is the user's night
    assert in_quiet_hours(datetime(2026, 3, 2, 15, tzinfo=UTC), SHANGHAI, POLICY)


def test_a_kept_date_is_its_day_every_later_year_and_29_february_is_kept_on_28_february() -> None:
    assert same_day_of_year(date(1992, 2, 29), date(2026, 2, 28))
    assert not same_day_of_year(date(1992, 2, 29), date(2028, 2, 28))  # a leap year has its own 29th
    assert "02-29" in anniversary_keys(date(2026, 2, 28))
    birthday = MemoryRecord(
        id="mem_b",
        scope=Scope("xiaoxiang", "cli:alice"),
        content="主人的生日",
        category="core",
        importance=3.0,
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
        last_access=datetime(2025, 1, 1, tzinfo=UTC),
        source="user",
        about=datetime(1990, 3, 3, tzinfo=SHANGHAI),  # stored as 2 March 16:00 UTC
    )
    due = kept_date(birthday, at(3, 1), SHANGHAI, POLICY)
    assert due is not None and due.due_at == at(3, 9) and due.stale_at == at(4, 0)
    assert kept_date(birthday, at(2, 20), SHANGHAI, POLICY) is None


def test_a_silence_needs_an_active_stretch_before_it() -> None:
    last = at(1, 20)
    assert long_silence(last, 2, last + timedelta(days=5), SHANGHAI, POLICY) is None  # not active enough
    assert long_silence(last, 3, last + timedelta(days=3), SHANGHAI, POLICY) is None  # not silent long enough
    due = long_silence(last, 3, last + timedelta(days=4, hours=1), SHANGHAI, POLICY)
    assert due is not None and due.due_at == at(5, 20) and due.occasion == last


def test_the_verdict_keeps_the_manners() -> None:
    due, stale = at(3, 12), at(5, 0)
    fine = Standing(consent=True, last_message_at=at(2, 12), unanswered=0, sent_today=0)
    assert verdict(due, stale, at(3, 12), SHANGHAI, POLICY, fine).action == "send"
    off = Standing(consent=False, last_message_at=None, unanswered=0, sent_today=0)
    assert verdict(due, stale, at(3, 12), SHANGHAI, POLICY, off).action == "drop"
    ignored = Standing(consent=True, last_message_at=None, unanswered=2, sent_today=0)
    assert verdict(due, stale, at(3, 12), SHANGHAI, POLICY, ignored).reason == "2 check-ins unanswered"
    talking = Standing(consent=True, last_message_at=at(3, 11, 50), unanswered=0, sent_today=0)
    assert verdict(due, stale, at(3, 12), SHANGHAI, POLICY, talking).later == at(3, 12, 20)
    night = verdict(due, stale, at(3, 23), SHANGHAI, POLICY, fine)
    assert night.action == "later" and night.later == at(4, 9)
    today_done = Standing(consent=True, last_message_at=None, unanswered=1, sent_today=1)
    assert verdict(due, stale, at(3, 12), SHANGHAI, POLICY, today_done).later == at(4, 9)
    assert verdict(due, at(3, 23), at(3, 21), SHANGHAI, POLICY, today_done).reason == "stale"
