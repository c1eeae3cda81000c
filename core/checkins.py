"""CheckIns: the companion writes first, only to those who want it, the way a considerate friend would.

Consent first: nobody gets a check-in unless they said `/checkins on`, or the operator turned them on
by default for a platform's private chats and they did not say `/checkins off`. The rules of what is
worth a check-in and the manners are pure functions in `knowledge/rules/checkins.py`; this module
plans by them, and carries each one out exactly once:

1. **Planning** (the scheduler's `checkins:plan`, once per slot across processes, and at start-up):
   each rule selects its candidates by index (dated memories by a range query over `about`, kept
   dates by their day of the year, silences by the contact's last message), consent is looked up for
   those only, and each occasion is planned under an id derived from it, so planning twice plans once.
   Nothing due: no model call, no job.
2. **Dispatch**: a planned check-in whose time has come becomes a durable `checkin` job, for the
   platforms this process can send on (its `Outbox`es).
3. **The job** checks the manners again, then claims the check-in (one conditional update: of two
   jobs or processes, one wins), asks the chat model to write it in character (saved in the job's
   checkpoint before anything is sent), marks it `sending`, sends it and stores it in the conversation
   as the companion's message. A re-run after a crash never sends twice: a check-in found `sending`
   may have gone out, so it is recorded, not sent again.

A platform that refuses (the user blocked the bot, their DMs are closed) turns check-ins off for that
user, and the reason is kept for the operator (`companion checkins list`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, tzinfo
from functools import partial
from typing import ClassVar, Protocol

from core import phrasebook
from core.background.checkpoint import Stage
from core.background.tasks import BackgroundTasks, FlatPayload
from core.clock import Clock
from core.errors import RecipientRefusedError
from core.llm.client import LLMClient
from core.reply.prompt import persona_prompt
from core.reply.time_context import TurnTime, duration, memory_line, now_section, threads_lines
from core.types import ChatMessage, ConversationRef, UserRef
from knowledge.conversations.working_memory import WorkingMemory
from knowledge.journal.checkin_log import Checkin, CheckinLog, Contact, checkin_id
from knowledge.journal.job_queue import Job
from knowledge.journal.ongoing_threads import OngoingThread, OngoingThreads
from knowledge.journal.user_settings import UserSettings
from knowledge.records import Category, MemoryRecord, Scope, StoredMessage
from knowledge.rules.checkins import (
    CheckinPolicy,
    Due,
    Standing,
    anniversary_keys,
    kept_date,
    local_midnight,
    long_silence,
    plan_passed,
    silence_bounds,
    verdict,
)
from knowledge.rules.decay import MemoryPolicy, PolicyFor, default_policy
from personas.loader import Persona

log = logging.getLogger(__name__)

PLAN_LOOKBACK = timedelta(days=2)  # a plan's check-in is stale by the end of the day after it
RECENT_MESSAGES = 8  # of the conversation, in the prompt that writes a check-in
ANSWER_WAIT = timedelta(days=2)  # a sent check-in keeps its conversation open this long for the answer
DISPATCH_LIMIT = 1000  # check-ins turned into jobs per pass; more wait for the next


@dataclass(frozen=True)
class CheckinJob(FlatPayload):
    """A planned check-in to write and send."""

    KIND: ClassVar[str] = "checkin"
    checkin_id: str


class Outbox(Protocol):
    """Where check-ins leave the process: one per platform adapter (core never imports a platform)."""

    def reaches(self, user: UserRef) -> bool:
        """Whether this outbox can write to the user (`telegram:7` on Telegram; the terminal's own user)."""
        ...

    async def deliver(self, user: UserRef, conversation: ConversationRef, text: str) -> None:
        """Send `text` to the user's private conversation; raise `RecipientRefusedError` if the platform refuses."""
        ...


class DatedMemories(Protocol):
    """The knowledge base's cross-scope queries by date, and its reads of one scope."""

    def dated_records(
        self, after: datetime, before: datetime, *, categories: Iterable[Category]
    ) -> list[MemoryRecord]: ...

    def records_on_days(self, days: Iterable[str], *, categories: Iterable[Category]) -> list[MemoryRecord]: ...

    def get(self, scope: Scope, ids: Iterable[str]) -> list[MemoryRecord]: ...

    def memories(self, scope: Scope, *, categories: Iterable[Category] | None = None) -> list[MemoryRecord]: ...


@dataclass(frozen=True, slots=True)
class CheckinDefaults:
    """The operator's switches: the whole feature, and whether a platform's private chats get check-ins
    from users who never said `/checkins` (off unless the operator says so)."""

    enabled: bool = True
    platforms: Mapping[str, bool] = field(default_factory=dict)  # "telegram", "discord", "cli"

    def default_for(self, platform: str) -> bool:
        return bool(self.platforms.get(platform, False))


@dataclass(frozen=True, slots=True)
class PlanReport:
    """What one planning pass did."""

    candidates: int  # occasions the rules found (before consent and contacts)
    planned: int  # check-ins newly planned
    dispatched: int  # jobs started for check-ins whose time has come
    seconds: float


class CheckIns:
    """Plans check-ins, carries each out once through the job queue, and answers `/checkins`."""

    def __init__(
        self,
        *,
        log: CheckinLog,
        user_settings: UserSettings,
        knowledge: DatedMemories,
        working_memory: WorkingMemory,
        llm: LLMClient,
        persona: Callable[[str], Persona],
        tasks: BackgroundTasks,
        clock: Clock,
        policy: CheckinPolicy | None = None,
        defaults: CheckinDefaults | None = None,
        memory_policy: PolicyFor = default_policy,
        members: Callable[[str], list[str]] = lambda user_id: [user_id],
        threads: OngoingThreads | None = None,
    ) -> None:
        """`members`: the identities of a scope's user (a linked person has several, `Links.members`); `threads`:
        what is going on in each user's life, which a check-in may follow up on."""
        self.log = log
        self._members = members
        self._threads = threads
        self.policy = policy or CheckinPolicy()
        self.defaults = defaults or CheckinDefaults()
        self._settings = user_settings
        self._knowledge = knowledge
        self._working_memory = working_memory
        self._llm = llm
        self._persona = persona
        self._tasks = tasks
        self._clock = clock
        self._memory_policy = memory_policy
        self._outboxes: list[Outbox] = []
        tasks.register(CheckinJob, self._run)

    # -- consent -------------------------------------------------------------------------------

    def consents(self, scope: Scope) -> bool:
        """Whether the user wants check-ins: their own word, else the operator's default for their platform."""
        if not self.defaults.enabled:
            return False
        chosen = self._settings.chosen_checkins(scope)
        return self._default(scope, self.log.contact(scope)) if chosen is None else chosen

    async def command(self, scope: Scope, request: str) -> str:
        """`/checkins [on|off]`: switch them, or say how they stand; returns what to tell the user."""
        word = request.strip().lower()
        if not self.defaults.enabled:
            return phrasebook.CHECKINS_DISABLED
        if word not in ("on", "off"):
            return phrasebook.checkins_status(self.consents(scope)) if not word else phrasebook.CHECKINS_USAGE
        on = word == "on"
        await asyncio.to_thread(self._switch, scope, on)
        return phrasebook.checkins_switched(on)

    def _switch(self, scope: Scope, on: bool) -> None:
        self._settings.set_checkins(scope, on)
        if not on:  # stops at once whatever is planned; one already being sent cannot be called back
            cancelled = self.log.cancel(scope, "the user turned check-ins off", self._clock.now())
            if cancelled:
                log.info("check-ins off for %s: %d cancelled", scope, cancelled)

    def status(self, scope: Scope) -> str:
        """The line `/memory` ends with."""
        contact = self.log.contact(scope)
        return phrasebook.checkins_status(self.consents(scope), contact.off_reason if contact else "")

    def user_wrote(self, scope: Scope, conversation_id: str, at: datetime) -> None:
        """The user wrote in private: check-ins go to that conversation, and none is unanswered any more."""
        self.log.user_wrote(scope, conversation_id, at)

    # -- outboxes ------------------------------------------------------------------------------

    def add_outbox(self, outbox: Outbox) -> None:
        """Send check-ins through `outbox` from now on (a platform adapter registers its own)."""
        self._outboxes.append(outbox)

    def remove_outbox(self, outbox: Outbox) -> None:
        """Stop sending through `outbox` (its platform stopped)."""
        self._outboxes = [each for each in self._outboxes if each is not outbox]

    def _default(self, scope: Scope, contact: Contact | None) -> bool:
        """The operator's default for a user who never said: that of the platform they last wrote from in private
        (a linked person has identities on several)."""
        if contact is not None:
            return self.defaults.default_for(ConversationRef.parse(contact.conversation_id).platform)
        return any(self.defaults.default_for(UserRef.parse(user).platform) for user in self._members(scope.user_id))

    def _recipient(self, checkin: Checkin) -> UserRef:
        """Who the check-in is written to: of the user's identities, the one the conversation is on (the one
        it is with, where its id says: the terminal's, a Telegram private chat)."""
        conversation = ConversationRef.parse(checkin.conversation_id)
        there = [
            user
            for user in map(UserRef.parse, self._members(checkin.scope.user_id))
            if user.platform == conversation.platform
        ]
        return next((user for user in there if user.id == conversation.id), there[0] if there else None) or (
            UserRef.parse(checkin.scope.user_id)
        )

    def _outbox_for(self, checkin: Checkin) -> Outbox | None:
        user = self._recipient(checkin)
        return next((outbox for outbox in self._outboxes if outbox.reaches(user)), None)

    # -- planning ------------------------------------------------------------------------------

    async def plan(self) -> PlanReport:
        """The planning pass over every user: plan what is due, then start the check-ins whose time has come."""
        if not self.defaults.enabled:
            return PlanReport(0, 0, 0, 0.0)
        started = asyncio.get_running_loop().time()
        candidates, planned = await asyncio.to_thread(self._plan_all, self._clock.now())
        dispatched = self.dispatch()  # on the loop: it starts jobs
        report = PlanReport(candidates, planned, dispatched, asyncio.get_running_loop().time() - started)
        if planned or dispatched:
            log.info("check-ins: %d occasions, %d planned, %d started", candidates, planned, dispatched)
        return report

    def _plan_all(self, now: datetime) -> tuple[int, int]:
        found = self._dated_dues(now)
        silent = self.log.silent_contacts(*silence_bounds(now, self.policy))
        contacts = self.log.contacts(scope for scope, _ in found)
        contacts.update({contact.scope: contact for contact in silent})
        wanted = set(contacts)
        chosen = self._settings.chosen_checkins_of(wanted)
        zones: dict[Scope, tzinfo] = {}

        def zone(scope: Scope) -> tzinfo:
            if scope not in zones:
                zones[scope] = self._settings.time_zone(scope)
            return zones[scope]

        def consents(scope: Scope) -> bool:
            return chosen.get(scope, self._default(scope, contacts.get(scope)))

        dues = [
            (scope, due)
            for scope, rule in found
            if scope in contacts and consents(scope) and (due := rule(zone(scope))) is not None
        ]
        for contact in silent:
            if consents(contact.scope) and (due := self._silence_due(contact, now, zone(contact.scope))):
                dues.append((contact.scope, due))
        planned = self.log.plan(self._checkin(scope, due, contacts[scope], now) for scope, due in dues)
        return len(found) + len(silent), planned

    def _dated_dues(self, now: datetime) -> list[tuple[Scope, Callable[[tzinfo], Due | None]]]:
        """Plans just past and dates kept today, of every scope, each with its rule waiting for the user's zone."""
        policy = self.policy
        plans = self._knowledge.dated_records(now - PLAN_LOOKBACK, now, categories=["fact", "core"])
        # today in any zone: a day of the year either side of today in UTC
        days = {key for shift in (-1, 0, 1) for key in anniversary_keys((now + timedelta(days=shift)).date())}
        kept = self._knowledge.records_on_days(sorted(days), categories=["core"])
        found: list[tuple[Scope, Callable[[tzinfo], Due | None]]] = []
        for record in plans:
            found.append((record.scope, partial(plan_passed, record, now, policy=policy)))
        for record in kept:
            found.append((record.scope, partial(kept_date, record, now, policy=policy)))
        return found

    def _silence_due(self, contact: Contact, now: datetime, zone: tzinfo) -> Due | None:
        """The silence check-in of a contact, if they were active before falling silent."""
        window = timedelta(days=self.policy.active_window_days)
        days = self._working_memory.log.days_written(contact.scope, contact.last_user_at - window, contact.last_user_at)
        return long_silence(contact.last_user_at, days, now, zone, self.policy)

    @staticmethod
    def _checkin(scope: Scope, due: Due, contact: Contact, now: datetime) -> Checkin:
        return Checkin(
            id=checkin_id(scope, due.rule, due.memory_id, due.occasion),
            scope=scope,
            rule=due.rule,
            memory_id=due.memory_id,
            occasion=due.occasion,
            conversation_id=contact.conversation_id,
            due_at=due.due_at,
            stale_at=due.stale_at,
            planned_at=now,
        )

    async def run_due_for(self, scope: Scope) -> int:
        """Plan and send what is due for one user now (the terminal, at the start of a chat); returns how many
        check-ins went out."""
        if not self.defaults.enabled:
            return 0
        await asyncio.to_thread(self._plan_all, self._clock.now())
        due = [checkin for checkin in self.log.due(self._clock.now()) if checkin.scope == scope]
        for checkin in due:
            self._start(checkin)
        await self._tasks.drain_scope(scope)
        return sum(1 for checkin in due if (done := self.log.get(checkin.id)) and done.state == "sent")

    def dispatch(self) -> int:
        """Start a job for each planned check-in whose time has come, on the platforms this process sends on."""
        started = 0
        for checkin in self.log.due(self._clock.now(), limit=DISPATCH_LIMIT):
            if self._outbox_for(checkin) is not None:
                self._start(checkin)
                started += 1
        return started

    def _start(self, checkin: Checkin) -> None:
        job = self._tasks.submit(checkin.scope, CheckinJob(checkin.id))
        self.log.carried_by(checkin.id, job.id)  # a second job (a crash before this line) finds it claimed

    # -- carrying one out ----------------------------------------------------------------------

    async def _run(self, job: Job, carried: CheckinJob) -> None:
        checkin = self.log.get(carried.checkin_id)
        if checkin is None:
            return  # forgotten meanwhile
        outbox = self._outbox_for(checkin)
        if checkin.state == "planned":
            if outbox is None:  # this process cannot send to the user: leave it to one that can
                self.log.postpone(checkin.id, checkin.due_at)
                return
            if not self._claim(checkin, job):
                return
            checkin = replace(checkin, state="writing", job_id=job.id)
        elif checkin.job_id != job.id or checkin.state not in ("writing", "sending"):
            return  # done, cancelled, or carried out by another job
        progress = self._tasks.checkpoint(job)
        text = progress.get(Stage.CHECKIN_TEXT)
        note = "sent before a restart; delivery not confirmed"  # found `sending`: it may have gone out
        if checkin.state == "writing":
            if outbox is None:
                self.log.postpone(checkin.id, checkin.due_at)
                return
            if text is None:
                text = await self._write_or_fail(checkin, job)
                if text is None:
                    self.log.end(checkin.id, "dropped", "its memory is gone", self._clock.now())
                    return
                progress.put(Stage.CHECKIN_TEXT, text)
                progress.reached("checkin: written, not sent")
            self.log.sending(checkin.id)
            progress.reached("checkin: about to send")
            if not await self._deliver(outbox, checkin, text):
                return
            progress.reached("checkin: sent, not recorded")
            note = ""
        await asyncio.to_thread(self._record_sent, checkin, text or "", note)

    def _claim(self, checkin: Checkin, job: Job) -> bool:
        """Check the manners once more, then take the check-in for this job (False: not now, or not ours)."""
        now = self._clock.now()
        scope = checkin.scope
        zone = self._settings.time_zone(scope)
        window = self._working_memory.window(scope.persona_id, checkin.conversation_id)
        contact = self.log.contact(scope)
        standing = Standing(
            consent=self.consents(scope),
            last_message_at=window[-1].sent_at if window else None,
            unanswered=contact.unanswered if contact else 0,
            sent_today=self.log.sent_since(scope, local_midnight(now, zone)),
        )
        decided = verdict(checkin.due_at, checkin.stale_at, now, zone, self.policy, standing)
        if decided.action == "drop":
            self.log.end(checkin.id, "dropped", decided.reason, now)
            return False
        if decided.action == "later":
            assert decided.later is not None
            self.log.postpone(checkin.id, decided.later)
            return False
        return self.log.claim(checkin.id, job.id)

    async def _deliver(self, outbox: Outbox, checkin: Checkin, text: str) -> bool:
        """Send it; a refusal turns check-ins off for the user, with the reason kept. False: it did not go."""
        user = self._recipient(checkin)
        try:
            await outbox.deliver(user, ConversationRef.parse(checkin.conversation_id), text)
        except RecipientRefusedError as error:
            reason = f"{user.platform} refused on {self._clock.now():%Y-%m-%d}: {error}"
            self._settings.set_checkins(checkin.scope, False)
            self.log.switched_off(checkin.scope, reason)
            self.log.end(checkin.id, "failed", reason, self._clock.now())
            self.log.cancel(checkin.scope, "check-ins turned off: the platform refused", self._clock.now())
            log.warning("check-ins turned off for %s: %s", checkin.scope, reason)
            return False
        except Exception as error:  # it may or may not have arrived: never sent again, the operator sees why
            self.log.end(checkin.id, "failed", f"{type(error).__name__}: {error}", self._clock.now())
            log.exception("sending check-in %s failed", checkin.id)
            return False
        return True

    def _record_sent(self, checkin: Checkin, text: str, note: str) -> None:
        """The check-in stays in the conversation as the companion's message, so the answer continues it."""
        message_id = f"msg_{hashlib.sha256(checkin.id.encode()).hexdigest()[:16]}"
        if text and not self._working_memory.log.existing([message_id]):
            persona = self._persona(checkin.scope.persona_id)
            self._working_memory.append(
                persona.id,
                checkin.conversation_id,
                role="assistant",
                user_id=checkin.scope.user_id,
                speaker_name=persona.name,
                content=text,
                sent_at=self._clock.now(),
                message_id=message_id,
            )
        self.log.sent(checkin, self._clock.now(), message_id, note)

    async def _write_or_fail(self, checkin: Checkin, job: Job) -> str | None:
        """`_write`; on the job's last attempt a failure also ends the check-in, so none waits for ever."""
        try:
            return await self._write(checkin)
        except Exception as error:
            if job.attempts + 1 >= self._tasks.max_attempts:  # the job becomes a dead letter: the check-in fails
                reason = f"could not be written: {type(error).__name__}"
                self.log.end(checkin.id, "failed", reason, self._clock.now())
            raise

    async def _write(self, checkin: Checkin) -> str | None:
        """The check-in in the persona's words (None: the memory it is about is gone)."""
        scope = checkin.scope
        memory = None
        if checkin.memory_id is not None:
            found = await asyncio.to_thread(self._knowledge.get, scope, [checkin.memory_id])
            if not found:
                return None
            memory = found[0]
        persona = self._persona(scope.persona_id)
        window = self._working_memory.window(scope.persona_id, checkin.conversation_id)
        contact = self.log.contact(scope)
        # check-ins go to private chats only: every thread of the user may be followed up on there
        threads = [] if self._threads is None else await asyncio.to_thread(self._threads.active, scope)
        messages = checkin_prompt(
            persona,
            checkin,
            memory,
            window[-RECENT_MESSAGES:],
            speaker=_speaker(window),
            now=self._clock.now().astimezone(self._settings.time_zone(scope)),
            previous=contact.last_user_at if contact else None,
            policy=self._memory_policy(scope.persona_id),
            threads=threads,
        )
        text = (await self._llm.complete(messages, role="chat", choice=persona.models.get("chat"))).strip()
        if not text:
            raise ValueError("the chat model wrote an empty check-in")  # retried by the job queue
        return text

    def awaiting_answer(self) -> set[tuple[str, str]]:
        """(persona, conversation) pairs where a check-in waits for its answer: the idle pass keeps them open."""
        return self.log.awaiting_answer(self._clock.now() - ANSWER_WAIT)


def _speaker(window: list[StoredMessage]) -> str | None:
    return next((message.speaker_name for message in reversed(window) if message.role == "user"), None)


def checkin_prompt(
    persona: Persona,
    checkin: Checkin,
    memory: MemoryRecord | None,
    window: list[StoredMessage],
    *,
    speaker: str | None,
    now: datetime,
    previous: datetime | None,
    policy: MemoryPolicy,
    threads: Sequence[OngoingThread] = (),
) -> list[ChatMessage]:
    """The prompt that writes a check-in: the character, now (with what is going on in the user's life: `threads`),
    why it writes (so the model invents no other reason), the memory that triggered it and the recent conversation."""
    title = persona.title_for(speaker)
    when = TurnTime(now=now, previous=previous, new_conversation=True, conversation_start=now)
    system = persona_prompt(persona, speaker) + "\n\n" + now_section(when, title)
    if threads:
        system += "\n" + threads_lines(threads, now, title)
    remembered = "" if memory is None else memory_line(memory, when, policy)
    system += "\n\n## Why you are writing first\n" + phrasebook.checkin_reason(
        checkin.rule, title, remembered, duration(now - checkin.occasion), threads=bool(threads)
    )
    conversation = [ChatMessage(message.role, message.content) for message in window]
    cue = ChatMessage("user", phrasebook.checkin_cue(title))
    return [ChatMessage("system", system), *conversation, cue]
