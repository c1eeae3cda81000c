"""MemoryLifecycle: the background half of the companion.

It turns events of the reply path (a message arriving, its turn ending, a closed conversation) and of the scheduler
(daily decay, idle conversations, profiles and chapters due, the nightly consolidation) into durable jobs, and runs
each job with the right role: KnowledgeMonitor, ConversationSummarizer, ChapterWriter, MemoryReviewer, ProfileWriter
or Consolidator. Nothing here runs on the reply path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any, ClassVar

from core.background.chapter_writer import ChapterWriter
from core.background.consolidation.consolidator import Consolidator
from core.background.conversation_summarizer import ConversationSummarizer
from core.background.knowledge_monitor import KnowledgeMonitor, MonitorReport, Turn
from core.background.memory_reviewer import MemoryReviewer
from core.background.monitor_ops import Add, Change, Delete, Update
from core.background.profile_writer import ProfileWriter
from core.background.tasks import BackgroundTasks, FlatPayload
from core.clock import Clock
from core.types import StoredTurn
from knowledge.conversations.history import ConversationHistory
from knowledge.conversations.working_memory import WorkingMemory
from knowledge.journal.job_queue import Job
from knowledge.memory.decay_pass import DecayPass, DecayReport
from knowledge.records import ReviewKind, Scope
from knowledge.rules.chapters import ChapterWindow, Span
from knowledge.rules.small_talk import nothing_to_learn
from knowledge.search.embedding import background_lane
from personas.loader import Persona

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MonitorJob:
    """A turn for the monitor: its messages' ids, never their text (it reads them when it runs)."""

    KIND: ClassVar[str] = "monitor"
    conversation_id: str
    message_id: str  # the user's message ("" in a job that carries the `turn` itself)
    group: bool
    reply_id: str | None = None  # the stored reply, once the turn ended with one
    shown_ids: tuple[str, ...] = ()  # the memories the reply's prompt showed
    turn: Turn | None = None  # a job written before jobs carried message ids: the turn itself

    def to_json(self) -> dict[str, Any]:
        if self.turn is not None:
            return {"turn": asdict(self.turn)}
        saved = {"conversation_id": self.conversation_id, "message_id": self.message_id, "group": self.group}
        if self.reply_id is not None:
            saved |= {"reply_id": self.reply_id, "shown_ids": list(self.shown_ids)}
        return saved

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> MonitorJob:
        if "turn" in saved:  # JSON made the turn's tuples lists
            fields: dict[str, Any] = {name: tuple(v) if isinstance(v, list) else v for name, v in saved["turn"].items()}
            turn = Turn(**fields)
            return cls(turn.conversation_id, "", turn.group, turn=turn)
        shown_ids = tuple(saved.get("shown_ids", ()))
        return cls(saved["conversation_id"], saved["message_id"], saved["group"], saved.get("reply_id"), shown_ids)


@dataclass(frozen=True)
class SummarizeJob(FlatPayload):
    """A conversation whose messages left the window, to become episodes."""

    KIND: ClassVar[str] = "summarize"
    conversation_id: str


@dataclass(frozen=True)
class ChapterJob(FlatPayload):
    """A week, month or year of one scope to fold into its chapter."""

    KIND: ClassVar[str] = "chapter"
    span: Span
    start: str  # the window's start, ISO 8601 in the user's zone

    @classmethod
    def of(cls, window: ChapterWindow) -> ChapterJob:
        return cls(window.span, window.start.isoformat())


@dataclass(frozen=True)
class ReviewJob(FlatPayload):
    """A promote or decay review of one memory."""

    KIND: ClassVar[str] = "review"
    memory_id: str
    kind: ReviewKind


@dataclass(frozen=True)
class ProfileJob(FlatPayload):
    """A rewrite of the scope's profile, asked for at `requested_at` (ISO): changes marked since wait for the next."""

    KIND: ClassVar[str] = "profile"
    requested_at: str


@dataclass(frozen=True)
class ConsolidationJob(FlatPayload):
    """One scope's nightly consolidation, for the night that starts at `night` (ISO)."""

    KIND: ClassVar[str] = "consolidate"
    night: str


class MemoryLifecycle:
    """Schedules and runs the monitor, summarizer and reviewer; owns the decay and idle passes."""

    def __init__(
        self,
        *,
        tasks: BackgroundTasks,
        monitor: KnowledgeMonitor,
        summarizer: ConversationSummarizer,
        chapters: ChapterWriter,
        reviewer: MemoryReviewer,
        decay_pass: DecayPass,
        working_memory: WorkingMemory,
        history: ConversationHistory,
        persona: Callable[[str], Persona],
        clock: Clock,
        idle_timeout: timedelta = timedelta(minutes=30),
        dead_letter_retention: timedelta = timedelta(days=7),
        enabled: bool = True,
        keep_open: Callable[[], set[tuple[str, str]]] = set,
        profile_writer: ProfileWriter | None = None,
        consolidator: Consolidator | None = None,
        spare_small_talk: bool = True,
        spared: Callable[[], None] = lambda: None,
    ) -> None:
        """`enabled=False` turns the background off: events submit no job (for measuring what it costs).
        `dead_letter_retention`: how long a dead letter keeps the text of the work that failed.
        `keep_open`: (persona, conversation) pairs the idle pass leaves open however quiet (a check-in
        waiting for its answer, which must continue the conversation). `profile_writer`: writes each user's
        profile when their facts changed (None: no profiles). `consolidator`: consolidates each active scope's
        facts nightly (None: never). `spare_small_talk`: a turn of small talk ("ok", "haha", "好的") is stored and
        indexed as any, but the monitor is not asked about it (`knowledge/rules/small_talk.py`); `spared` is told of
        each turn spared."""
        self.spare_small_talk = spare_small_talk
        self._spared = spared
        self._keep_open = keep_open
        self._profile_writer = profile_writer
        self._consolidator = consolidator
        self.tasks = tasks
        self.enabled = enabled
        self._history = history
        self._monitor = monitor
        self._summarizer = summarizer
        self._chapters = chapters
        self._reviewer = reviewer
        self._decay_pass = decay_pass
        self._working_memory = working_memory
        self._persona = persona
        self._clock = clock
        self.idle_timeout = idle_timeout
        self.dead_letter_retention = dead_letter_retention
        tasks.register(MonitorJob, self._run_monitor)
        tasks.register(SummarizeJob, self._run_summarizer)
        tasks.register(ReviewJob, self._run_reviewer)
        tasks.register(ProfileJob, self._run_profile)
        tasks.register(ChapterJob, self._run_chapter)
        tasks.register(ConsolidationJob, self._run_consolidation)

    # -- events ------------------------------------------------------------------------------

    def turn_started(self, scope: Scope, conversation_id: str, message_id: str, *, group: bool) -> TurnEnd:
        """A user message is about to be stored as `message_id`: its monitor job is written first.

        The job holds until the turn ends, which the returned callable is told once: with what was
        stored, or None when no reply was (refused, the model failed, the reply was abandoned). Either
        way the monitor then looks at the message, so what the user said never depends on the reply;
        a process that dies first leaves the job pending, and the next start runs it without a reply.
        The job carries message ids, never text: it reads the messages when it runs.
        """
        if not self.enabled:
            return _ignore_end
        held = MonitorJob(conversation_id, message_id, group)
        job = self.tasks.hold(scope, held)
        ended = False

        def end(stored: StoredTurn | None) -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            answered = None if stored is None else replace(held, reply_id=stored.reply_id, shown_ids=stored.shown_ids)
            self.tasks.release(job, answered)
            if self._working_memory.archived(scope.persona_id, conversation_id):
                self.conversation_overflowed(scope, conversation_id)

        return end

    def conversation_overflowed(self, scope: Scope, conversation_id: str) -> None:
        """Messages left the window (overflow, `/new`, idle): turn them into episodes."""
        if not self.enabled:
            return
        self.tasks.submit(scope, SummarizeJob(conversation_id))

    def review(self, scope: Scope, memory_id: str, kind: ReviewKind) -> None:
        """Queue a promote or decay review of one memory."""
        if not self.enabled:
            return
        self.tasks.submit(scope, ReviewJob(memory_id, kind))

    # -- scheduled passes ----------------------------------------------------------------------

    async def run_decay(self) -> DecayReport:
        """The decay pass over every scope, then a review job for each review it requested (or asked again);
        the windows due to be folded into chapters are submitted first."""
        await self.plan_chapters()
        report = await asyncio.to_thread(self._decay_pass.apply_decay)
        for scope, memory_id, kind in report.reviews:
            self.review(scope, memory_id, kind)
        log.info(
            "decay pass: %d due, %d deleted, %d reviews%s, %d rescheduled in %.2fs",
            report.scanned,
            report.deleted,
            len(report.reviews),
            " (the most a pass asks: more wait for later passes)" if report.capped else "",
            report.rescheduled,
            report.seconds,
        )
        return report

    async def plan_chapters(self) -> int:
        """Submit a job for every week, month and year due to be folded into its chapter (each scope's weeks
        first, so its months find them written); returns how many. Daily, and at start: after downtime it
        catches up every window missed."""
        if not self.enabled:
            return 0
        due = await asyncio.to_thread(self._chapters.due, self._clock.now())
        for scope, window in due:
            self.tasks.submit(scope, ChapterJob.of(window))
        if due:
            log.info("chapters: %d windows to fold", len(due))
        return len(due)

    async def summarize_idle(self) -> int:
        """Close and summarise conversations quiet for longer than the idle timeout.

        The same pass catches up the history index, for messages stored before a restart or while no
        reply could be given (every turn indexes its own messages).
        """
        quiet = self._working_memory.idle_conversations(before=self._clock.now() - self.idle_timeout)
        waiting = self._keep_open() if quiet else set()
        idle = [conversation for conversation in quiet if conversation not in waiting]
        for persona_id, conversation_id in idle:
            last = self._working_memory.window(persona_id, conversation_id)[-1]
            self._working_memory.close_window(persona_id, conversation_id)
            self.conversation_overflowed(Scope(persona_id, last.user_id), conversation_id)
        await self.index_history()
        return len(idle)

    async def write_profiles(self) -> int:
        """A profile job for each scope whose facts changed and whose profile is a day old or missing; returns
        how many were queued."""
        if not self.enabled or self._profile_writer is None:
            return 0
        due = await asyncio.to_thread(self._profile_writer.due)
        requested_at = self._clock.now().isoformat()
        for scope in due:
            self.tasks.submit(scope, ProfileJob(requested_at))
        if due:
            log.info("profile pass: %d profiles to rewrite", len(due))
        return len(due)

    async def plan_consolidation(self) -> int:
        """A consolidation job for each active scope whose latest night is not done; returns how many. Nightly,
        and at start: after downtime it catches up the night missed (one pass does every missed night's work)."""
        if not self.enabled or self._consolidator is None:
            return 0
        due = await asyncio.to_thread(self._consolidator.due)
        for scope, night in due:
            self.tasks.submit(scope, ConsolidationJob(night.isoformat()))
        if due:
            log.info("consolidation: %d scopes to consolidate", len(due))
        return len(due)

    async def prune_finished_work(self) -> int:
        """Delete finished jobs and the dead letters past their retention; returns how many rows went."""
        before = self._clock.now() - self.dead_letter_retention
        pruned = await asyncio.to_thread(self.tasks.prune, dead_letters_before=before)
        if pruned:
            log.info("pruned %d finished jobs and expired dead letters", pruned)
        return pruned

    async def index_history(self) -> int:
        """Index the messages stored since the last time (background work); returns how many."""
        with background_lane():
            return await asyncio.to_thread(self._history.index_pending)

    # -- job handlers --------------------------------------------------------------------------

    async def _run_monitor(self, job: Job, monitor: MonitorJob) -> None:
        # The turn's messages become searchable history first; catching up is idempotent: a retry costs nothing.
        await self.index_history()
        persona = self._persona(job.scope.persona_id)
        turn = await asyncio.to_thread(self._turn_of, persona, monitor)
        if turn is None:
            return  # the message is gone (forgotten or deleted) or was never stored: nothing to learn
        if await asyncio.to_thread(self._small_talk, monitor, turn):
            await asyncio.to_thread(self._spared)
            log.debug("monitor job %s spared: its turn is small talk", job.id)
            return
        report = await self._monitor.review_turn(persona, job.scope, turn, self.tasks.checkpoint(job))
        for memory_id, kind in report.reviews:
            self.review(job.scope, memory_id, kind)
        if self._profile_writer is not None and _facts_changed(report):
            deleted = [op.memory_id for op in report.applied if isinstance(op, Delete)]
            if deleted:
                await asyncio.to_thread(self._profile_writer.sources_deleted, job.scope, deleted)
            await asyncio.to_thread(self._profile_writer.mark_changed, job.scope)

    def _small_talk(self, monitor: MonitorJob, turn: Turn) -> bool:
        """Whether the turn's message, after the companion's message before it, has nothing for the monitor."""
        if not self.spare_small_talk or monitor.turn is not None:  # an old job carries no id to find what came before
            return False
        if not nothing_to_learn(turn.user_text, None):
            return False  # most turns: no need to read what came before
        before = self._working_memory.log.reply_before(monitor.message_id)
        return nothing_to_learn(turn.user_text, None if before is None else before.content)

    def _turn_of(self, persona: Persona, monitor: MonitorJob) -> Turn | None:
        """The turn a monitor job names, as its messages read now."""
        if monitor.turn is not None:
            return monitor.turn
        ids = [monitor.message_id, *([monitor.reply_id] if monitor.reply_id else [])]
        found = {message.id: message for message in self._working_memory.log.get(ids)}
        said = found.get(monitor.message_id)
        if said is None:
            return None
        reply = found.get(monitor.reply_id or "")
        return Turn(
            user_text=said.content,
            reply_text=None if reply is None else reply.content,
            speaker_name=said.speaker_name,
            persona_name=persona.name,
            user_title=persona.title_for(said.speaker_name),
            shown_ids=monitor.shown_ids,
            conversation_id=said.conversation_id,
            message_ids=tuple(found),
            group=monitor.group,
            sent_at=said.sent_at.isoformat(),
        )

    async def _run_summarizer(self, job: Job, summarize: SummarizeJob) -> None:
        persona = self._persona(job.scope.persona_id)
        await self._summarizer.summarize(persona, summarize.conversation_id, self.tasks.checkpoint(job))

    async def _run_chapter(self, job: Job, chapter: ChapterJob) -> None:
        persona = self._persona(job.scope.persona_id)
        window = self._chapters.window(job.scope, chapter.span, datetime.fromisoformat(chapter.start))
        await self._chapters.fold(persona, job.scope, window)
        if self._profile_writer is not None:  # the profile is written from chapters too
            await asyncio.to_thread(self._profile_writer.mark_changed, job.scope)

    async def _run_reviewer(self, job: Job, review: ReviewJob) -> None:
        persona = self._persona(job.scope.persona_id)
        await self._reviewer.review(persona, job.scope, review.memory_id, review.kind, self.tasks.checkpoint(job))

    async def _run_profile(self, job: Job, profile: ProfileJob) -> None:
        if self._profile_writer is None:
            return  # profiles were switched off after the job was queued
        persona = self._persona(job.scope.persona_id)
        requested_at = datetime.fromisoformat(profile.requested_at)
        await self._profile_writer.rewrite(persona, job.scope, requested_at, self.tasks.checkpoint(job))

    async def _run_consolidation(self, job: Job, night: ConsolidationJob) -> None:
        if self._consolidator is None:
            return  # consolidation was switched off after the job was queued
        persona = self._persona(job.scope.persona_id)
        moment = datetime.fromisoformat(night.night)
        report = await self._consolidator.consolidate(persona, job.scope, moment, self.tasks.checkpoint(job))
        if report is None:
            return  # that night was done already (a restart, another process)
        log.info(
            "consolidation: %d groups asked about, %d facts merged away, %d rewritten, %d dead letters",
            report.groups,
            report.merged,
            report.rewritten,
            report.dead_letters,
        )
        if report.changed_ids and self._profile_writer is not None:  # the profile is written from facts
            await asyncio.to_thread(self._profile_writer.mark_changed, job.scope)


def _facts_changed(report: MonitorReport) -> bool:
    """Whether a turn's review added, changed or deleted a memory (what a profile is written from)."""
    return any(isinstance(op, (Add, Update, Change, Delete)) for op in report.applied)


TurnEnd = Callable[[StoredTurn | None], None]  # told once how a turn ended: what it stored, or None


def _ignore_end(stored: StoredTurn | None) -> None:
    """The end of a turn when the background is off."""
