"""The check-in log on both backends: planned once per occasion, claimed by one job, unanswered counted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from knowledge.journal.checkin_log import Checkin, CheckinLog, checkin_id
from knowledge.journal.user_settings import UserSettings
from knowledge.records import Scope
from tests.conftest import Backend

NOW = datetime(2026, 1, 5, 12, tzinfo=UTC)
ALICE = Scope("xiaoxiang", "telegram:101")
BOB = Scope("xiaoxiang", "telegram:202")


def planned(scope: Scope, memory_id: str = "mem_1") -> Checkin:
    return Checkin(
        id=checkin_id(scope, "plan_passed", memory_id, NOW - timedelta(hours=2)),
        scope=scope,
        rule="plan_passed",
        memory_id=memory_id,
        occasion=NOW - timedelta(hours=2),
        conversation_id=f"telegram:chat:{scope.user_id[9:]}",
        due_at=NOW,
        stale_at=NOW + timedelta(days=1),
        planned_at=NOW,
    )


def test_an_occasion_is_planned_once_claimed_by_one_job_and_counted_unanswered_until_the_user_writes(
    backend: Backend,
) -> None:
    log = CheckinLog(backend.open())
    log.user_wrote(ALICE, "telegram:chat:101", NOW - timedelta(days=1))
    assert log.plan([planned(ALICE)]) == 1
    again = CheckinLog(backend.open())  # another process planning the same occasion
    assert again.plan([planned(ALICE)]) == 0
    [due] = log.due(NOW)
    assert log.claim(due.id, "job_a") and not again.claim(due.id, "job_b")
    assert log.due(NOW) == []
    assert log.sending(due.id) and not again.sending(due.id)
    assert log.sent(due, NOW, "msg_1") and not again.sent(due, NOW, "msg_1")
    assert log.contact(ALICE).unanswered == 1  # type: ignore[union-attr]
    assert log.awaiting_answer(NOW - timedelta(days=2)) == {("xiaoxiang", "telegram:chat:101")}
    log.user_wrote(ALICE, "telegram:chat:101", NOW + timedelta(hours=1))
    assert log.contact(ALICE).unanswered == 0  # type: ignore[union-attr]
    assert log.awaiting_answer(NOW - timedelta(days=2)) == set()
    assert log.sent_since(ALICE, NOW - timedelta(hours=1)) == 1


def test_turning_off_cancels_what_is_planned_and_forget_leaves_nothing(backend: Backend) -> None:
    db = backend.open()
    log, settings = CheckinLog(db), UserSettings(db)
    for scope in (ALICE, BOB):
        log.user_wrote(scope, f"telegram:chat:{scope.user_id[9:]}", NOW - timedelta(days=5))
        log.plan([planned(scope)])
    settings.set_checkins(ALICE, False)
    assert settings.chosen_checkins_of([ALICE, BOB]) == {ALICE: False}
    assert log.cancel(ALICE, "off", NOW) == 1
    assert [checkin.scope for checkin in log.due(NOW)] == [BOB]
    silent = log.silent_contacts(NOW - timedelta(days=6), NOW - timedelta(days=4))
    assert {contact.scope for contact in silent} == {ALICE, BOB}
    assert log.silent_contacts(NOW - timedelta(days=4), NOW) == []
    assert log.forget(ALICE) == 2
    assert log.contact(ALICE) is None
    assert {checkin.scope for checkin in log.listing(since=NOW - timedelta(days=1))} == {BOB}
