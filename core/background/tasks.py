"""BackgroundTasks: post-turn work that never blocks a reply and is never lost.

Every job is written to the job queue before it runs, so a restart resumes it. Jobs of one scope
run one at a time in the order they were written (two turns of one user never apply memory
operations concurrently), even where several processes share the queue: a worker takes the scope's
cluster-wide lock (`ClusterLocks`; nothing to wait for with one process) and runs its oldest job,
then the next, reading each from the queue. A process that finds the scope taken leaves the job to
the holder, which looks for more once it lets go. Different scopes run side by side up to a limit:
a worker waits for one of the slots before it takes its scope's lock, so a backlog of many scopes
holds as many locks (in server mode, database connections) as there are slots, not one per scope.
A job that raises is retried with backoff (its scope kept, its slot given back while it waits); when
it runs out of attempts it becomes a visible dead letter. A job may be held (written, not started)
until what it waits for is over; a process that dies first leaves it held by a worker that is gone,
and `resume` (at the next start, or in another process: `watch`) releases and runs it. A re-run
continues from the job's checkpoint.

Each job is read again from the queue right before it runs, and runs with a forget-fence ticket: a
forget that erased it (or the text it carried) meanwhile wins, and a job whose scope is forgotten
while it runs is run again from what the forget left of it, instead of writing back what it read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any, ClassVar, Protocol, Self, TypeVar

from core.background.checkpoint import Checkpoint, CrashPoint, no_crash
from core.clock import Clock
from knowledge.errors import storage_problem
from knowledge.forget.fence import ForgetFence, ScopeForgottenError
from knowledge.journal.job_queue import Job, JobQueue
from knowledge.records import Scope
from knowledge.search.embedding import background_lane
from knowledge.sql.cluster import ClusterLocks, SingleProcess

log = logging.getLogger(__name__)

DEFAULT_BACKOFF = (2.0, 15.0, 60.0)  # seconds before the 2nd, 3rd and 4th attempt
LOOK_EVERY = 0.1  # seconds between two looks at the event loop's pace while jobs run
LATE = 0.05  # seconds the event loop may run late before the background gives way: replies wait for the CPU
FEWEST = 4  # jobs that may start at once however late the loop runs, so a backlog keeps shrinking


class Slots:
    """How many scopes' jobs run at once: at most `most`, fewer while the replies need the CPU.

    While the event loop runs late (it answers the users), the limit halves at each look, down to `fewest`;
    while it keeps time, the limit grows by one a look. Jobs that run finish; only new ones wait. So under a
    burst of messages the background takes the CPU the replies leave, and its backlog is caught up after."""

    def __init__(self, most: int, *, fewest: int = FEWEST) -> None:
        self.most = most
        self.fewest = min(fewest, most)
        self.limit = most
        self.running = 0
        self._room = asyncio.Event()
        self._room.set()

    async def acquire(self) -> None:
        while self.running >= self.limit:
            self._room.clear()
            await self._room.wait()
        self.running += 1

    def release(self) -> None:
        self.running -= 1
        self._open()

    async def step_aside(self, seconds: float) -> None:
        """Give a held slot to others for `seconds`, then take it back. Cancelled meanwhile (a stop), it counts
        as held again at once, without waiting for room: the holder's `async with` gives it back as it unwinds."""
        self.release()
        try:
            await asyncio.sleep(seconds)
            await self.acquire()  # counts the slot only once it has it: a cancellation leaves it uncounted
        except asyncio.CancelledError:
            self.running += 1
            raise

    def observe(self, late: float) -> None:
        """The event loop ran `late` seconds late at a look."""
        self.limit = max(self.fewest, self.limit // 2) if late > LATE else min(self.most, self.limit + 1)
        self._open()

    def reset(self) -> None:
        """Every slot open again."""
        self.limit = self.most
        self._open()

    def _open(self) -> None:
        if self.running < self.limit:
            self._room.set()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *_: object) -> None:
        self.release()


class JobPayload(Protocol):
    """What one kind of job carries (ids, not text, where it can), stored as JSON with the job under `KIND`."""

    KIND: ClassVar[str]

    def to_json(self) -> dict[str, Any]: ...

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> Self:
        """The payload `to_json` stored, in any form a version of it has stored."""
        ...


class FlatPayload:
    """A dataclass payload of plain JSON values (ids, flags), stored as an object of its fields."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> Self:
        return cls(**saved)


P = TypeVar("P", bound=JobPayload)
JobHandler = Callable[[Job], Awaitable[None]]


class BackgroundTasks:
    """Durable, per-scope ordered job runner."""

    def __init__(
        self,
        jobs: JobQueue,
        clock: Clock,
        *,
        backoff: Sequence[float] = DEFAULT_BACKOFF,
        concurrency: int = 4,
        fence: ForgetFence | None = None,
        crash_point: CrashPoint = no_crash,
        cluster: ClusterLocks | None = None,
    ) -> None:
        """`fence`: the forget fence shared with the forgetting service. `crash_point`: told of every point
        between two writes of a job (a test may raise there). `cluster`: the processes sharing the queue."""
        self._jobs = jobs
        self._fence = fence or ForgetFence()
        self._crash_point = crash_point
        self._cluster = cluster or SingleProcess()
        self._clock = clock
        self._backoff = tuple(backoff)
        self._handlers: dict[str, JobHandler] = {}
        self._workers: dict[Scope, asyncio.Task[None]] = {}
        self._unreleased: dict[str, tuple[Job, JobPayload | None]] = {}  # held jobs an outage kept from release
        self.slots = Slots(concurrency)
        self._closing = False
        self._watching: asyncio.Task[None] | None = None
        self._pacing: asyncio.Task[None] | None = None

    @property
    def max_attempts(self) -> int:
        return len(self._backoff) + 1

    def register(self, payload: type[P], handler: Callable[[Job, P], Awaitable[None]]) -> None:
        """Say which coroutine runs the jobs that carry `payload`; it is handed the job and its payload."""

        async def run(job: Job) -> None:
            await handler(job, payload.from_json(job.payload))

        self._handlers[payload.KIND] = run

    def submit(self, scope: Scope, payload: JobPayload) -> Job:
        """Store a job and start it in the background; returns at once."""
        job = self._jobs.enqueue(self._known(payload), scope, payload.to_json(), at=self._clock.now())
        self._schedule(scope)
        return job

    def hold(self, scope: Scope, payload: JobPayload) -> Job:
        """Store a job that must not start yet; `release` starts it. Returns at once."""
        kind = self._known(payload)
        return self._jobs.enqueue(kind, scope, payload.to_json(), at=self._clock.now(), held_by=self._cluster.worker_id)

    def release(self, job: Job, payload: JobPayload | None = None) -> None:
        """Start a held job, with the payload it learned while held, if any (while the database is away, the
        watch releases it once it is back)."""
        try:
            self._jobs.release(job.id, None if payload is None else payload.to_json())
        except Exception as error:
            if storage_problem(error) != "unavailable":
                raise
            self._unreleased[job.id] = (job, payload)
            return
        self._unreleased.pop(job.id, None)
        self._schedule(job.scope)

    def _known(self, payload: JobPayload) -> str:
        if payload.KIND not in self._handlers:
            raise ValueError(f"no handler registered for {payload.KIND!r} jobs")
        return payload.KIND

    def checkpoint(self, job: Job) -> Checkpoint:
        """What earlier runs of `job` saved; what this run puts in it is saved with the job at once."""
        return Checkpoint(self._jobs.progress(job.id), partial(self._jobs.save_progress, job), self._crash_point)

    def resume(self) -> int:
        """Schedule the jobs left pending by processes that are gone (or still waiting for their scope's
        turn); returns how many jobs wait to run."""
        released = self._jobs.release_orphans(alive=self._cluster.alive)
        waiting = self._jobs.scopes_with_work()
        for scope in waiting:
            self._schedule(scope)
        if released or waiting:
            log.info("resuming %d pending background jobs (%d held by a process gone)", sum(waiting.values()), released)
        return sum(waiting.values())

    def retry(self, letter_id: str) -> Job | None:
        """Run a dead letter's work again as a new job with fresh attempts, and drop the letter; None if it is not
        kept, or is not a job this runner knows that ran out of attempts (the monitor's unreadable answers are kept
        to be read, not rerun)."""
        letter = self._jobs.letter(letter_id)
        if letter is None or "job_id" not in letter.payload or letter.kind not in self._handlers:
            return None
        payload = {key: value for key, value in letter.payload.items() if key != "job_id"}
        job = self._jobs.enqueue(letter.kind, letter.scope, payload, at=self._clock.now())
        self._jobs.discard(letter_id)
        self._schedule(letter.scope)
        return job

    def watch(self, every: float) -> None:
        """Look for work other processes left (one that died mid-job or mid-turn) every `every` seconds,
        until `aclose`; needed only where several processes share the queue."""
        self._watching = asyncio.create_task(self._watch(every), name="jobs:watch")

    async def _watch(self, every: float) -> None:
        while not self._closing:
            await asyncio.sleep(every)
            try:
                for job, payload in list(self._unreleased.values()):
                    self.release(job, payload)
                await asyncio.to_thread(self._cluster.alive, self._cluster.worker_id)  # keeps our life lock held
                await asyncio.to_thread(self._jobs.release_orphans, self._cluster.alive)
                for scope in self._jobs.scopes_with_work():
                    self._schedule(scope)
            except Exception as error:  # the database may be away for a moment: look again later
                if storage_problem(error) != "unavailable":
                    log.exception("looking for background work left by other processes failed; trying again")

    def prune(self, *, dead_letters_before: datetime) -> int:
        """Finished work keeps no text: delete finished jobs, and dead letters older than the cutoff."""
        return self._jobs.prune(dead_letters_before=dead_letters_before)

    async def drain(self) -> None:
        """Wait until every scheduled job has finished (or been dead-lettered)."""
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)
        if self._pacing is not None:
            await asyncio.gather(self._pacing, return_exceptions=True)

    async def drain_scope(self, scope: Scope) -> None:
        """Wait until the scope's scheduled jobs have finished (or been dead-lettered)."""
        while (worker := self._workers.get(scope)) is not None:
            await asyncio.gather(worker, return_exceptions=True)

    async def aclose(self, *, grace: float = 10.0) -> None:
        """Let running work finish for up to `grace` seconds; what is left stays pending in the job queue."""
        self._closing = True
        for looking in (self._watching, self._pacing):
            if looking is not None:
                looking.cancel()
                await asyncio.gather(looking, return_exceptions=True)
        try:
            await asyncio.wait_for(self.drain(), timeout=grace)
        except TimeoutError:
            for worker in self._workers.values():
                worker.cancel()
            await asyncio.gather(*self._workers.values(), return_exceptions=True)
            log.warning("stopped with background jobs still pending; they resume at the next start")

    def _schedule(self, scope: Scope) -> None:
        """Make sure a worker runs the scope's jobs (a running one takes each next job from the queue)."""
        if self._closing:
            return  # stays pending in the job queue
        if scope not in self._workers:
            self._workers[scope] = asyncio.create_task(self._work(scope), name=f"jobs:{scope}")
        if self._pacing is None or self._pacing.cancelling():  # none, or one told to stop as the last job ended
            self._pacing = asyncio.create_task(self._pace(), name="jobs:pace")

    async def _pace(self) -> None:
        """While jobs run (the last one to end stops it), look how late the event loop runs and size the slots by
        it; once none runs, every slot is open again (nothing is known then of what the replies need)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                started = loop.time()
                await asyncio.sleep(LOOK_EVERY)
                self.slots.observe(loop.time() - started - LOOK_EVERY)
        finally:
            if self._pacing is asyncio.current_task():  # not yet followed by another
                self.slots.reset()
                self._pacing = None

    async def _work(self, scope: Scope) -> None:
        try:
            await self._work_through(scope)
        except Exception as error:
            if storage_problem(error) != "unavailable":
                raise
            # The database is away: the jobs stay pending in it, and the watch schedules them once it is back.
            log.debug("background jobs of a scope wait for the database (%s)", error)
        finally:
            self._workers.pop(scope, None)
            if not self._workers and self._pacing is not None:
                self._pacing.cancel()  # the last job is done: nothing to pace

    async def _work_through(self, scope: Scope) -> None:
        while True:
            async with self.slots, self._cluster.try_acquire(f"jobs:{scope}") as ours:
                if not ours:
                    return  # another process runs the scope's jobs, and looks for more once it lets go
                while (job := self._jobs.next_job(scope)) is not None:
                    await self._run(job)
            # Let go, then look once more: a job written meanwhile by a process that found the scope
            # taken is ours to run. (No await from here to leaving `_workers`: a job submitted here
            # after this look starts a new worker.)
            if self._jobs.next_job(scope) is None:
                return

    async def _run(self, job: Job) -> None:
        handler = self._handlers.get(job.kind)
        attempts = job.attempts
        while (current := self._jobs.job(job.id)) is not None:  # None: a forget erased it, or it is done
            try:
                if handler is None:
                    raise LookupError(f"no handler registered for {job.kind!r} jobs")
                await self._admitted(handler, current)
            except asyncio.CancelledError:
                raise
            except ScopeForgottenError:
                log.info("%s job %s: its scope was forgotten while it ran; running it again", job.kind, job.id)
            except Exception as error:
                if storage_problem(error) == "unavailable":
                    raise  # not the job's fault: it runs again once the database is back
                attempts += 1
                if not await self._retry_or_give_up(current, attempts, error):
                    return
            else:
                self._crash_point(f"{job.kind}: finished, not yet marked done")
                self._jobs.complete(job.id)
                return

    async def _admitted(self, handler: JobHandler, job: Job) -> None:
        token = self._fence.admit()
        try:
            with background_lane():  # its embeddings yield the CPU to replies: a backlog waits, replies don't
                await handler(job)
        finally:
            self._fence.leave(token)

    async def _retry_or_give_up(self, job: Job, attempts: int, error: Exception) -> bool:
        reason = f"{type(error).__name__}: {error}"
        now = self._clock.now()
        if attempts >= self.max_attempts:
            letter = self._jobs.give_up(job, error=reason, at=now)
            log.error("%s job %s failed %d times; dead letter %s", job.kind, job.id, attempts, letter.id)
            return False
        delay = self._backoff[attempts - 1]
        log.warning("%s job %s failed (%s); retrying in %.0fs", job.kind, job.id, reason, delay)
        self._jobs.retry_later(job.id, error=reason, not_before=now + timedelta(seconds=delay))
        # Other scopes' jobs may run meanwhile; this scope's next jobs wait behind it.
        await self.slots.step_aside(delay)
        return True
