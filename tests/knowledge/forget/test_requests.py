"""`/forget <what>` questions in the shared database: answered by whichever process the answer reaches, once,
within the hour; forgetting everything takes them too."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from knowledge.forget.requests import REQUEST_TTL, ForgetRequests
from knowledge.records import Scope
from tests.conftest import Backend

ASKED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_a_question_asked_in_one_process_is_answered_once_in_another(
    backend: Backend, alice: Scope, bob: Scope
) -> None:
    asking, answering = ForgetRequests(backend.open()), ForgetRequests(backend.open())
    key = asking.ask(alice, "my locker code", ASKED)
    other = asking.ask(bob, "my ex", ASKED)
    assert answering.take(key, ASKED + timedelta(minutes=5)) == (alice, "my locker code")
    assert answering.take(key, ASKED + timedelta(minutes=5)) is None  # an answer is given once
    assert asking.take(other, ASKED + REQUEST_TTL + timedelta(seconds=1)) is None  # expired


def test_forgetting_and_pruning_leave_no_question_behind(backend: Backend, alice: Scope, bob: Scope) -> None:
    requests = ForgetRequests(backend.open())
    mine, theirs = requests.ask(alice, "my locker code", ASKED), requests.ask(bob, "my ex", ASKED)
    assert requests.forget(alice) == 1 and requests.take(mine, ASKED) is None
    later = requests.ask(alice, "my diagnosis", ASKED + timedelta(minutes=30))
    assert requests.prune(ASKED + REQUEST_TTL + timedelta(minutes=1)) == 1  # bob's, unanswered for too long
    assert requests.take(theirs, ASKED) is None and requests.take(later, ASKED + timedelta(minutes=31))
