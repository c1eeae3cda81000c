"""Ongoing threads on both backends: opened once, news merged, closed, and deleted by a forget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from knowledge.forget.target import NOTHING, ForgetTarget
from knowledge.journal.ongoing_threads import OngoingThreads
from knowledge.records import Scope
from tests.conftest import Backend

NOW = datetime(2026, 1, 5, 12, tzinfo=UTC)
ALICE = Scope("xiaoxiang", "telegram:101")
BOB = Scope("xiaoxiang", "telegram:202")
GROUP = "telegram:chat:-1001"


def test_a_thread_is_opened_once_gets_its_news_and_leaves_the_active_ones_when_closed(backend: Backend) -> None:
    threads = OngoingThreads(backend.open())
    since = NOW - timedelta(days=7)
    for _ in range(2):  # a job re-run after a crash opens it again: kept once
        threads.open(ALICE, "thr_1", "job hunt", "sent three applications", since=since, at=NOW,
                     message_ids=["msg_1"], place=None)  # fmt: skip
    [opened] = threads.active(ALICE)
    assert (opened.title, opened.news, opened.since, opened.message_ids, opened.places) == (
        "job hunt", "sent three applications", since, ("msg_1",), (None,)
    )  # fmt: skip
    later = NOW + timedelta(days=2)
    for _ in range(2):
        assert threads.add_news(ALICE, "thr_1", "interview on Monday", at=later, message_ids=["msg_5"], place=GROUP)
    [updated] = OngoingThreads(backend.open()).active(ALICE)  # another process reads the same
    assert (updated.news, updated.updated_at, updated.message_ids) == ("interview on Monday", later, ("msg_1", "msg_5"))
    assert updated.places == (None, GROUP)
    assert not threads.add_news(BOB, "thr_1", "not Bob's", at=later, message_ids=[], place=None)  # scope-bound
    assert threads.add_news(ALICE, "thr_1", "got the job", at=later, message_ids=["msg_9"], place=None, close=True)
    assert threads.active(ALICE) == [] and threads.all(ALICE)[0].closed_at == later
    assert threads.prune(later + timedelta(days=29)) == 0  # kept a while after it closed ...
    assert threads.prune(later + timedelta(days=31)) == 1 and threads.all(ALICE) == []  # ... then gone


def test_a_forget_deletes_the_threads_learned_from_a_forgotten_message_or_carrying_its_words(
    backend: Backend,
) -> None:
    threads = OngoingThreads(backend.open())
    threads.open(ALICE, "thr_1", "搬家", "下周搬到上海", since=NOW, at=NOW, message_ids=["msg_1"], place=None)
    threads.open(ALICE, "thr_2", "job hunt", "two interviews", since=NOW, at=NOW, message_ids=["msg_2"], place=None)
    threads.open(BOB, "thr_3", "job hunt", "two interviews", since=NOW, at=NOW, message_ids=["msg_2"], place=None)
    assert threads.erase(ALICE, {"msg_7"}, ForgetTarget.of_phrase("my cat")) == 0
    assert threads.erase(ALICE, set(), ForgetTarget.of_phrase("搬到上海")) == 1
    assert threads.erase(ALICE, {"msg_2"}, NOTHING) == 1
    assert threads.all(ALICE) == [] and len(threads.active(BOB)) == 1  # another scope is never touched
    assert threads.forget(BOB) == 1 and threads.all(BOB) == []
