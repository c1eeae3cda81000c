"""BackgroundTasks: durable, ordered per scope, retried, dead-lettered, resumed exactly once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from core.background.tasks import LATE, BackgroundTasks, FlatPayload, Slots
from knowledge.forget.fence import ForgetFence
from knowledge.forget.target import REDACTED, ForgetTarget
from knowledge.journal.job_queue import Job
from knowledge.journal.journal import Journal
from knowledge.records import Scope
from knowledge.sql.cluster import SingleProcess
from tests.fakes.clock import FakeClock


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path / "journal.sqlite3")


@dataclass(frozen=True)
class Work(FlatPayload):
    """A test job: a number to record, or a text to learn."""

    KIND: ClassVar[str] = "work"
    n: int = 0
    text: str = ""


def runner(journal: Journal, clock: FakeClock, **options: object) -> BackgroundTasks:
    return BackgroundTasks(journal.jobs, clock, backoff=options.pop("backoff", (0, 0)), **options)  # type: ignore[arg-type]


async def test_jobs_of_one_scope_run_one_at_a_time_in_order(journal: Journal, clock: FakeClock, alice: Scope) -> None:
    events: list[str] = []

    async def slow(job: Job, work: Work) -> None:
        events.append(f"start {work.n}")
        await asyncio.sleep(0.01)
        events.append(f"end {work.n}")

    tasks = runner(journal, clock)
    tasks.register(Work, slow)
    for n in range(3):
        tasks.submit(alice, Work(n))
    await tasks.drain()
    assert events == ["start 0", "end 0", "start 1", "end 1", "start 2", "end 2"]
    assert journal.jobs.pending_jobs() == []


async def test_different_scopes_run_side_by_side(journal: Journal, clock: FakeClock, alice: Scope, bob: Scope) -> None:
    both_running = asyncio.Event()
    running: set[str] = set()

    async def meet(job: Job, work: Work) -> None:
        running.add(job.scope.user_id)
        if len(running) == 2:
            both_running.set()
        await asyncio.wait_for(both_running.wait(), timeout=2)

    tasks = runner(journal, clock)
    tasks.register(Work, meet)
    tasks.submit(alice, Work())
    tasks.submit(bob, Work())
    await tasks.drain()
    assert both_running.is_set()


def test_slots_halve_while_the_event_loop_runs_late_and_grow_back_one_at_a_time() -> None:
    slots = Slots(64, fewest=8)
    for expected in (32, 16, 8, 8):
        slots.observe(LATE * 2)
        assert slots.limit == expected  # replies wait for the CPU: fewer jobs start, never below the floor
    slots.observe(LATE / 2)
    slots.observe(0.0)
    assert slots.limit == 10
    for _ in range(100):
        slots.observe(0.0)
    assert slots.limit == 64


async def test_a_job_waits_for_a_slot_while_the_limit_is_reached_and_starts_once_it_grows() -> None:
    slots = Slots(4, fewest=1)
    for _ in range(3):
        slots.observe(LATE * 2)
    await slots.acquire()
    waiting = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0.01)
    assert not waiting.done() and slots.running == 1
    slots.observe(0.0)  # the loop keeps time again: a second slot
    await asyncio.wait_for(waiting, timeout=1)
    assert slots.running == 2
    slots.release()
    slots.release()
    assert slots.running == 0


async def test_a_job_stopped_while_it_waits_to_be_retried_gives_its_slot_back_at_once_and_once() -> None:
    slots = Slots(1, fewest=1)

    async def failed_job_waiting_for_its_retry() -> None:
        async with slots:
            await slots.step_aside(60)

    retrying = asyncio.create_task(failed_job_waiting_for_its_retry())
    await asyncio.sleep(0)  # it holds the slot, then lends it out for its wait
    await asyncio.wait_for(slots.acquire(), timeout=1)  # another scope's job takes it meanwhile
    retrying.cancel()  # a stop
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(retrying, timeout=1)  # at once: a stop does not wait for the slot to come back
    assert slots.running == 1  # the other job's, not given back twice
    slots.release()
    assert slots.running == 0


async def test_the_runner_sees_the_event_loop_run_late_and_starts_fewer_jobs(
    journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    seen: list[int] = []

    async def hogging(job: Job, work: Work) -> None:
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # noqa: ASYNC251 - the event loop held on purpose, as replies waiting for the CPU hold it
        await asyncio.sleep(0.15)
        seen.append(tasks.slots.limit)

    tasks = runner(journal, clock, concurrency=64)
    tasks.register(Work, hogging)
    tasks.submit(alice, Work())
    await tasks.drain()
    assert seen and seen[0] < 64
    assert tasks.slots.limit == 64  # the last job ended: every slot open again


async def test_a_busy_event_loop_runs_fewer_jobs_at_once_and_every_job_still_runs_once(
    journal: Journal, clock: FakeClock
) -> None:
    at_once: list[tuple[int, int]] = []  # jobs running, and the limit, as each starts
    done: list[str] = []

    async def tracked(job: Job, work: Work) -> None:
        at_once.append((tasks.slots.running, tasks.slots.limit))
        await asyncio.sleep(0.005)
        done.append(job.scope.user_id)

    tasks = runner(journal, clock, concurrency=16)
    tasks.slots.fewest = 2
    for _ in range(5):
        tasks.slots.observe(LATE * 2)  # as the pacing sees it while replies wait for the CPU
    tasks.register(Work, tracked)
    users = [f"user-{number}" for number in range(12)]
    for user in users:
        tasks.submit(Scope("p", user), Work())
    await asyncio.sleep(0)
    assert tasks.slots.running <= 2
    await tasks.drain()
    assert sorted(done) == sorted(users)  # each once: the backlog waits, nothing is lost or run twice
    assert all(running <= limit for running, limit in at_once)
    assert tasks.slots.limit == 16  # nothing runs: every slot is open again
    assert journal.jobs.pending_jobs() == []


async def test_a_failing_job_is_retried_then_dead_lettered(journal: Journal, clock: FakeClock, alice: Scope) -> None:
    calls: list[int] = []

    async def broken(job: Job, work: Work) -> None:
        calls.append(1)
        raise RuntimeError("model said nonsense")

    tasks = runner(journal, clock, backoff=(0, 0))
    tasks.register(Work, broken)
    tasks.submit(alice, Work(text="hello"))
    await tasks.drain()
    assert len(calls) == 3
    [letter] = journal.jobs.dead_letters(alice)
    assert letter.kind == "work" and "model said nonsense" in letter.error
    assert letter.payload["text"] == "hello"
    assert journal.jobs.pending_jobs() == []


async def test_an_operator_retries_a_dead_letter_as_fresh_work_or_discards_it(
    journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    fixed = False
    done: list[str] = []

    async def until_fixed(job: Job, work: Work) -> None:
        if not fixed:
            raise RuntimeError("the model is down")
        done.append(work.text)

    tasks = runner(journal, clock)
    tasks.register(Work, until_fixed)
    for text in ("first", "second"):
        tasks.submit(alice, Work(text=text))
    await tasks.drain()
    first, second = journal.jobs.dead_letters(alice)
    fixed = True
    assert tasks.retry(first.id) is not None
    await tasks.drain()
    assert done == ["first"] and [letter.id for letter in journal.jobs.dead_letters(alice)] == [second.id]
    assert journal.jobs.discard(second.id) and journal.jobs.dead_letters() == []
    assert tasks.retry(second.id) is None and not journal.jobs.discard(second.id)
    unknown = journal.jobs.dead_letter("monitor", alice, {"output": "?"}, "unreadable", at=clock.now())
    assert tasks.retry(unknown.id) is None and journal.jobs.dead_letters() == [unknown]


async def test_a_job_that_fails_once_succeeds_on_retry(journal: Journal, clock: FakeClock, alice: Scope) -> None:
    outcomes = iter([RuntimeError("flaky"), None])

    async def flaky(job: Job, work: Work) -> None:
        error = next(outcomes)
        if error:
            raise error

    tasks = runner(journal, clock)
    tasks.register(Work, flaky)
    tasks.submit(alice, Work())
    await tasks.drain()
    assert journal.jobs.dead_letters() == [] and journal.jobs.pending_jobs() == []


async def test_pending_jobs_run_after_a_restart_exactly_once(tmp_path: Path, clock: FakeClock, alice: Scope) -> None:
    path = tmp_path / "journal.sqlite3"
    first = Journal(path)
    first.jobs.enqueue("work", alice, Work(1).to_json(), at=clock.now())
    done = first.jobs.enqueue("work", alice, Work(2).to_json(), at=clock.now())
    first.jobs.complete(done.id)
    first.close()

    ran: list[int] = []

    async def record(job: Job, work: Work) -> None:
        ran.append(work.n)

    journal = Journal(path)
    tasks = runner(journal, clock)
    tasks.register(Work, record)
    assert tasks.resume() == 1
    await tasks.drain()
    assert tasks.resume() == 0
    await tasks.drain()
    assert ran == [1]


async def test_closing_leaves_unfinished_work_pending(journal: Journal, clock: FakeClock, alice: Scope) -> None:
    async def forever(job: Job, work: Work) -> None:
        await asyncio.sleep(3600)

    tasks = runner(journal, clock)
    tasks.register(Work, forever)
    job = tasks.submit(alice, Work())
    await asyncio.sleep(0)
    await tasks.aclose(grace=0.05)
    assert [pending.id for pending in journal.jobs.pending_jobs()] == [job.id]


async def test_queued_jobs_a_forget_erased_do_not_run(
    journal: Journal, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    ran: list[str] = []

    async def record(job: Job, work: Work) -> None:
        await asyncio.sleep(0.01)
        ran.append(f"{job.scope.user_id} {work.n}")

    tasks = runner(journal, clock)
    tasks.register(Work, record)
    for n in range(3):
        tasks.submit(alice, Work(n))
        tasks.submit(bob, Work(n))
    await asyncio.sleep(0)  # each scope's first job is running
    journal.jobs.forget(alice)  # as `/forget` does
    await tasks.drain()
    assert [entry for entry in ran if entry.startswith("cli:alice")] == ["cli:alice 0"]
    assert len([entry for entry in ran if entry.startswith("cli:bob")]) == 3


def test_unknown_job_kinds_are_refused(journal: Journal, clock: FakeClock, alice: Scope) -> None:
    with pytest.raises(ValueError, match="no handler"):
        runner(journal, clock).submit(alice, Work())


async def test_a_job_whose_scope_is_forgotten_while_it_runs_writes_nothing_it_read_before(
    journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    fence = ForgetFence()
    started, release = asyncio.Event(), asyncio.Event()
    seen: list[str] = []

    async def learn(job: Job, work: Work) -> None:
        seen.append(work.text)
        started.set()
        await release.wait()  # the forced race: the forget lands exactly here
        await asyncio.to_thread(
            journal.changes.record_change,
            alice,
            "mem_1",
            action="add",
            actor="background_ai",
            old_content=None,
            new_content=work.text,
            at=clock.now(),
        )

    tasks = BackgroundTasks(journal.jobs, clock, backoff=(0, 0), fence=fence)
    tasks.register(Work, learn)
    tasks.submit(alice, Work(text="my PIN is 4471"))
    await started.wait()
    with fence.forgetting(alice):
        journal.erase(alice, set(), ForgetTarget.of_phrase("my PIN 4471"), at=clock.now())
    release.set()
    await tasks.drain()

    assert seen == ["my PIN is 4471", REDACTED]  # run again, from what the forget left of the job
    assert [change.new_content for change in journal.changes.changes(alice)] == [REDACTED]
    assert journal.jobs.pending_jobs() == []


class CountedLocks(SingleProcess):
    """One process's locks, counting the scope locks held at once."""

    def __init__(self) -> None:
        super().__init__()
        self.held = self.most = 0

    @asynccontextmanager
    async def try_acquire(self, name: str) -> AsyncIterator[bool]:
        self.held += 1
        self.most = max(self.most, self.held)
        try:
            yield True
        finally:
            self.held -= 1


async def test_a_scope_waiting_for_a_slot_holds_no_lock(journal: Journal, clock: FakeClock) -> None:
    done: list[str] = []

    async def slow(job: Job, work: Work) -> None:
        await asyncio.sleep(0.01)
        done.append(job.scope.user_id)

    locks = CountedLocks()
    tasks = runner(journal, clock, concurrency=2, cluster=locks)
    tasks.register(Work, slow)
    for user in range(10):
        tasks.submit(Scope("xiaoxiang", f"cli:{user}"), Work())
    await tasks.drain()
    assert sorted(done) == sorted(f"cli:{user}" for user in range(10))
    assert locks.most == 2  # in server mode each is a database connection: as many as slots, not one per scope


async def test_a_job_waiting_to_be_retried_gives_its_slot_to_other_scopes_but_keeps_its_own_in_order(
    journal: Journal, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    events: list[str] = []

    async def flaky(job: Job, work: Work) -> None:
        events.append(f"{job.scope.user_id} {work.n}")
        if work.n == 0 and events.count(f"{job.scope.user_id} 0") == 1 and job.scope == alice:
            raise RuntimeError("the model is away for a moment")

    tasks = runner(journal, clock, concurrency=1, backoff=(0.2,))
    tasks.register(Work, flaky)
    tasks.submit(alice, Work(0))
    tasks.submit(alice, Work(1))
    tasks.submit(bob, Work(0))
    await tasks.drain()
    assert events == ["cli:alice 0", "cli:bob 0", "cli:alice 0", "cli:alice 1"]
