"""The chapter rules: windows cut in the user's zone, when each is due, how a chapter decays."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from knowledge.dates.windows import find_window
from knowledge.records import MemoryRecord, Scope
from knowledge.rules.chapters import ChapterWindow, chapter_label, due_windows, window_of
from knowledge.rules.decay import MemoryPolicy, current_importance, decay_outcome, next_due
from knowledge.rules.temporal import in_prompt, in_window

SHANGHAI = ZoneInfo("Asia/Shanghai")
ALICE = Scope("xiaoxiang", "cli:alice")


def chapter(window: ChapterWindow, *, created: datetime | None = None) -> MemoryRecord:
    made = created or window.end + timedelta(days=1)
    return MemoryRecord(
        id=window.chapter_id(ALICE),
        scope=ALICE,
        content="主人这周搬了家。",
        category="chapter",
        importance=1.0,
        created_at=made,
        last_access=made,
        source="background_ai",
        about=window.start.astimezone(UTC),
        until=window.end.astimezone(UTC),
    )


def test_weeks_are_cut_inside_their_month_in_the_users_zone() -> None:
    # 23:30 UTC on 31 January is already 1 February in Shanghai
    moment = datetime(2027, 1, 31, 23, 30, tzinfo=UTC)
    week = window_of("week", moment, SHANGHAI)
    assert (week.start, week.end) == (
        datetime(2027, 2, 1, tzinfo=SHANGHAI),
        datetime(2027, 2, 8, tzinfo=SHANGHAI),
    )
    last = window_of("week", datetime(2027, 2, 28, 12, tzinfo=SHANGHAI), SHANGHAI)
    assert (last.start.day, last.end) == (22, datetime(2027, 3, 1, tzinfo=SHANGHAI))
    tail = window_of("week", datetime(2027, 1, 30, 12, tzinfo=SHANGHAI), SHANGHAI)
    assert (tail.start.day, tail.end) == (29, datetime(2027, 2, 1, tzinfo=SHANGHAI))
    assert [tail.label, window_of("month", moment, SHANGHAI).label, window_of("year", moment, SHANGHAI).label] == [
        "29–31 January 2027",
        "February 2027",
        "2027",
    ]


def test_a_window_is_due_once_it_has_been_over_a_day_and_only_until_its_chapter_is_written() -> None:
    sent = [datetime(2027, 1, 3, 10, tzinfo=SHANGHAI), datetime(2027, 1, 20, 10, tzinfo=SHANGHAI)]
    week = window_of("week", sent[0], SHANGHAI)
    assert due_windows(sent, [], datetime(2027, 1, 8, 23, tzinfo=SHANGHAI), SHANGHAI) == []
    assert due_windows(sent, [], datetime(2027, 1, 9, tzinfo=SHANGHAI), SHANGHAI) == [week]
    assert due_windows(sent, [chapter(week)], datetime(2027, 1, 9, tzinfo=SHANGHAI), SHANGHAI) == []


def test_after_downtime_every_missed_week_comes_before_its_month_and_year() -> None:
    sent = [datetime(2026, 12, day, 9, tzinfo=SHANGHAI) for day in (2, 10, 30)]
    due = due_windows(sent, [], datetime(2027, 3, 1, tzinfo=SHANGHAI), SHANGHAI)
    assert [(window.span, window.start.day) for window in due] == [
        ("week", 1),
        ("week", 8),
        ("week", 29),
        ("month", 1),
        ("year", 1),
    ]


def test_a_chapter_fades_slowly_is_never_deleted_by_decay_and_always_shows_with_its_window() -> None:
    policy = MemoryPolicy()
    week = window_of("week", datetime(2027, 1, 3, tzinfo=SHANGHAI), SHANGHAI)
    record = chapter(week)
    a_year_later = record.created_at + timedelta(days=365)
    fact = MemoryRecord("mem_f", ALICE, "x", "fact", 1.0, record.created_at, record.created_at, "user")
    assert current_importance(record, a_year_later, policy) == 0.99 ** (365 - policy.grace_days)
    assert current_importance(record, a_year_later, policy) > current_importance(fact, a_year_later, policy)
    assert not decay_outcome(record, a_year_later, policy).delete
    assert next_due(record, policy) is None
    assert in_prompt(record, a_year_later, policy)  # its `until` ends its window, not its truth
    assert chapter_label(record, SHANGHAI) == "1–7 January 2027"


def test_a_time_named_finds_the_chapters_that_share_time_with_it() -> None:
    now = datetime(2027, 6, 10, 12, tzinfo=SHANGHAI)
    january = window_of("month", datetime(2027, 1, 5, tzinfo=SHANGHAI), SHANGHAI)
    march_week = window_of("week", datetime(2027, 3, 9, tzinfo=SHANGHAI), SHANGHAI)
    year_2026 = window_of("year", datetime(2026, 7, 1, tzinfo=SHANGHAI), SHANGHAI)
    chapters = [chapter(january), chapter(march_week), chapter(year_2026)]

    def found(text: str) -> list[str]:
        window = find_window(text, now)
        assert window is not None, text
        return [chapter_label(record, SHANGHAI) for record in chapters if in_window(record, window.utc())]

    assert found("what did we do in January?") == ["January 2027"]
    assert found("三月我们聊了什么") == ["8–14 March 2027"]
    assert found("去年夏天") == ["2026"]  # June to August of 2026: inside the year
    assert found("last month") == []
