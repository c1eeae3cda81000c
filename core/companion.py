"""Companion: the one entry point adapters call; a thin orchestrator over the roles in core/."""

from __future__ import annotations

import asyncio
import logging
import random
from datetime import datetime

from core import phrasebook
from core.background.lifecycle import MemoryLifecycle
from core.background.tasks import BackgroundTasks
from core.checkins import CheckIns, Outbox
from core.clock import Clock
from core.errors import UserFacingError
from core.forgetting import ForgetQuestion, ForgetReport, Forgetting
from core.memory_editor import MemoryEditor
from core.rate_limit import DailyQuota, RateLimiter
from core.reply.images import check_size
from core.reply.response_handler import ResponseHandler
from core.sharing import Sharing
from core.types import ConversationRef, IncomingMessage, TurnResult, UserRef, clean_text
from core.unsaved_messages import UnsavedMessages
from core.why import Why
from knowledge.conversations.history import ConversationHistory
from knowledge.conversations.spool import MessageSpool, SpooledMessage, in_order
from knowledge.dates.windows import TimeWindow
from knowledge.errors import storage_problem
from knowledge.journal.journal import Journal
from knowledge.journal.user_settings import UserSettings, find_time_zone
from knowledge.memory.lookup import FORGETTABLE, SearchResults, search_scope
from knowledge.memory.store import KnowledgeBase
from knowledge.people.joining import Joiner, JoinReport
from knowledge.people.links import Joining, Links, Refusal, is_person
from knowledge.records import MemoryRecord, Scope, ScoredMemory, new_message_id
from knowledge.rules.ranking import rank_for_prompt
from personas.loader import Persona, PersonaError, PersonaRegistry

log = logging.getLogger(__name__)

# Far beyond any chat message; above this we refuse before storing, so one paste cannot fill the disk.
MAX_MESSAGE_CHARS = 100_000
KeptMessage = SpooledMessage  # what `keep_for_next_start` kept, handed back to `unkeep`


class UnknownPersonaError(UserFacingError):
    """The requested persona does not exist or its file is broken."""


class Companion:
    """Handles messages and commands for every persona, user and conversation."""

    def __init__(
        self,
        *,
        personas: PersonaRegistry,
        knowledge: KnowledgeBase,
        history: ConversationHistory,
        responses: ResponseHandler,
        lifecycle: MemoryLifecycle,
        journal: Journal,
        user_settings: UserSettings,
        editor: MemoryEditor,
        forgetting: Forgetting,
        clock: Clock,
        default_persona: str,
        checkins: CheckIns,
        links: Links,
        joiner: Joiner,
        why: Why,
        rate_limiter: RateLimiter | None = None,
        quota: DailyQuota | None = None,
        spool: MessageSpool | None = None,
    ) -> None:
        """`spool`: where messages held through a database outage wait for the next start, at a stop."""
        self.personas = personas
        self.history = history
        self.knowledge = knowledge
        self.responses = responses
        self.lifecycle = lifecycle
        self.journal = journal
        self.clock = clock
        self.default_persona = default_persona
        self.user_settings = user_settings
        self.editor = editor
        self.sharing = Sharing(knowledge, user_settings, editor)
        self.forgetting = forgetting  # every route to forgetting: /forget, /forget <what>, the CLI, deletions
        self._rate_limiter = rate_limiter or RateLimiter(clock, per_minute=0)
        self.quota = quota or DailyQuota(lambda scope, since: 0, daily_tokens=0)
        self.unsaved = UnsavedMessages(self._store_held, clock)  # while the disk refuses writes
        self.checkins = checkins  # the companion writing first, to those who want it
        self.links = links  # which identities are one person (`/link`)
        self.joiner = joiner  # what joining moves: one memory out of two
        self.why = why  # what a reply's prompt held, read back from its trace
        self._spool = spool

    @property
    def tasks(self) -> BackgroundTasks:
        """The background job runner (tests await `companion.tasks.drain()`)."""
        return self.lifecycle.tasks

    def persona(self, persona_id: str | None = None) -> Persona:
        """The persona by id (default persona when None), with a clear error when it cannot be used."""
        try:
            return self.personas.get(persona_id or self.default_persona)
        except PersonaError as error:
            raise UnknownPersonaError(str(error)) from error

    async def handle(self, message: IncomingMessage, *, group: bool = False) -> TurnResult:
        """Answer one chat message. Empty or absurdly long input gets a clear answer, not an LLM call."""
        text = message.text.strip()
        if not text and message.image is None:
            return _notice(message, phrasebook.EMPTY_MESSAGE)
        if len(text) > MAX_MESSAGE_CHARS:
            return _notice(message, phrasebook.too_long(len(text), MAX_MESSAGE_CHARS))
        if not self._rate_limiter.allow(message.user_id):
            return _notice(message, phrasebook.too_fast(self._rate_limiter.per_minute))
        persona = self.persona(message.persona_id)
        scope = self.scope(persona.id, message.user)
        if self.quota.exhausted(scope, self.clock.now().astimezone(self.user_settings.time_zone(scope))):
            return _notice(message, phrasebook.OVER_QUOTA)  # no model call until the user's midnight
        if len(self.unsaved) and not self.unsaved.save():  # what was said before comes first
            self.unsaved.hold(persona.id, scope, message, group=group)
            return _notice(message, phrasebook.HELD_NOT_SAVED)
        # discretion: in a group only what was learned there, or what the user shared
        audience = self.user_settings.audience(scope, message.conversation_id, group=group)
        try:
            # The monitor hears of every stored message, whatever becomes of the reply.
            message_id = new_message_id()
            end_turn = self.lifecycle.turn_started(scope, message.conversation_id, message_id, group=group)
            if not group:  # check-ins go where the user writes in private
                self.checkins.user_wrote(scope, message.conversation_id, message.sent_at)
            zone = self.user_settings.time_zone(scope)  # "now", "yesterday" and plans are the user's own
            return await self.responses.reply(
                persona,
                scope,
                message,
                group=group,
                audience=audience,
                zone=zone,
                message_id=message_id,
                on_end=end_turn,
            )
        except Exception as error:
            problem = storage_problem(error)
            if problem is None or problem == "unavailable":  # an outage: the platform holds it, to answer it
                raise
            log.error("storage unavailable (%s): holding a message in memory", problem)
            self.unsaved.hold(persona.id, scope, message, group=group)
            return _notice(message, phrasebook.HELD_NOT_SAVED)

    def _store_held(self, persona_id: str, scope: Scope, message: IncomingMessage, group: bool) -> None:
        """Store a message held while the disk refused writes; the monitor hears of it like any other."""
        message_id = new_message_id()
        end_turn = self.lifecycle.turn_started(scope, message.conversation_id, message_id, group=group)
        self.responses.store_message(persona_id, scope, message, group=group, message_id=message_id)
        end_turn(None)

    def store_held_messages(self, *, last_chance: bool = False) -> bool:
        """Store the messages held while storage refused them (a quiet bot has no next turn to do it); True when
        none is held any more. At the `last_chance` (shutdown) what still cannot be stored is lost, and said so."""
        if not len(self.unsaved) or self.unsaved.save():
            return True
        if last_chance:
            self.unsaved.give_up()
        return False

    def scope(self, persona_id: str | None, user: UserRef | str) -> Scope:
        """The memory `user` speaks to with a persona (None: the default one): the one place where who is speaking
        becomes a scope. A linked identity speaks to its person's memory, shared by all its identities."""
        return Scope(self.persona(persona_id).id, self.links.person_of(str(user)))

    def keep_for_next_start(self, message: IncomingMessage, *, group: bool, arrival: int = 0) -> KeptMessage | None:
        """Keep a message received but not stored (held through a database outage, or waiting for its turn) in the
        spool file, which the next start stores (its image, if any, is not kept: its caption is). `arrival`: its
        place in the order messages arrived, which a stop may keep them out of. Returns what was kept, for
        `unkeep` once the message is stored (None: there is no spool file)."""
        if self._spool is None:
            log.error("a message not yet stored cannot be kept for the next start (no spool file)")
            return None
        kept = SpooledMessage(
            persona_id=message.persona_id or self.default_persona,
            user_id=message.user_id,
            conversation_id=message.conversation_id,
            speaker_name=message.speaker_name,
            text=message.text,
            sent_at=message.sent_at.isoformat(),
            source_id=message.source_id,
            group=group,
            arrival=arrival,
        )
        self._spool.add(kept)
        return kept

    def unkeep(self, kept: KeptMessage) -> None:
        """Drop a message `keep_for_next_start` kept: its turn came (a forget may have dropped it already)."""
        if self._spool is not None:
            self._spool.remove([kept])

    def store_spooled_messages(self) -> int:
        """At start: store the messages the last run kept in its spool file, in order; returns how many. One whose
        persona is gone stays there, said in the log, until its persona file is back: stored under another persona,
        it would reach a memory it was not said to."""
        if self._spool is None:
            return 0
        stored: list[SpooledMessage] = []
        for kept in in_order(self._spool.messages()):
            message = IncomingMessage(
                conversation=ConversationRef.parse(kept.conversation_id),
                user=UserRef.parse(kept.user_id),
                speaker_name=kept.speaker_name,
                text=kept.text,
                sent_at=datetime.fromisoformat(kept.sent_at),
                persona_id=kept.persona_id,
                source_id=kept.source_id,
            )
            try:
                scope = self.scope(kept.persona_id, message.user)
            except UnknownPersonaError:
                log.error(
                    "%s keeps a message for persona %r, which is gone: restore its file",
                    self._spool.path,
                    kept.persona_id,
                )
                continue
            if kept.source_id is None or self.history.by_source(kept.source_id) is None:
                try:
                    self._store_held(kept.persona_id, scope, message, kept.group)
                except Exception:
                    self._spool.remove(stored)
                    raise
            stored.append(kept)
        self._spool.remove(stored)
        if stored:
            log.warning("stored %d messages the last stop kept before they were answered", len(stored))
        return len(stored)

    async def already_received(self, source_id: str) -> bool:
        """Whether the platform message `source_id` is stored already. A platform may deliver one message
        twice (a webhook retried, polling resumed after a crash before the update was confirmed): the
        second delivery must not be stored, answered or learned from again."""
        return await asyncio.to_thread(self.history.by_source, source_id) is not None

    async def message_edited(self, source_id: str, text: str) -> bool:
        """A message was edited on its platform: the conversation and its history keep the new wording.

        Nothing is re-answered (the reply stays as it was), and memories already drawn from the old
        wording stay until corrected or forgotten. Whether the message was one we keep is returned.
        """
        words = _edited_words(text)
        if words is None:
            return False
        if await asyncio.to_thread(self.history.edit, source_id, words) is not None:
            return True
        return self.kept_message_changed(source_id, words)  # not stored yet: kept for the next start, maybe

    def kept_message_changed(self, source_id: str, text: str | None) -> bool:
        """A message kept in the spool file (not yet stored) was edited on its platform (`text`) or deleted (None):
        the next start stores its new words, or nothing. Whether it was kept is returned."""
        words = None if text is None else _edited_words(text)
        if text is not None and words is None:
            return False
        return self._spool is not None and self._spool.change(source_id, words) > 0

    def now(self) -> datetime:
        """The companion's "now" (the clock tests set)."""
        return self.clock.now()

    def persona_ids(self) -> list[str]:
        """The ids of every persona there is."""
        return self.personas.ids()

    def check_image_size(self, size: int) -> None:
        """Refuse, before it is downloaded, an image of `size` bytes beyond the operator's limit (`UserFacingError`)."""
        check_size(size, self.responses.image_limits)

    def image_side(self) -> int:
        """The longest side, in pixels, an image is shown to the model at (of the sizes a platform offers, the
        smallest that reaches it is enough)."""
        return self.responses.image_limits.max_side

    async def message_deleted(self, source_id: str) -> bool:
        """A message was deleted on its platform: it is forgotten, with what quotes it (see `Forgetting`)."""
        return await self.forgetting.message_deleted(source_id)

    def greeting(self, persona_id: str | None = None, user_name: str | None = None) -> str:
        """One of the persona's greetings, macros filled for `user_name`."""
        persona = self.persona(persona_id)
        return persona.fill(random.choice(persona.greetings), user_name)

    async def new_conversation(self, persona_id: str | None, conversation_id: str) -> str:
        """`/new`: close the conversation's window and greet anew."""
        persona = self.persona(persona_id)
        window = self.responses.working_memory.window(persona.id, conversation_id)
        if window:
            self.responses.working_memory.close_window(persona.id, conversation_id)
            self.responses.conversation_closed(persona.id, conversation_id)
            self.lifecycle.conversation_overflowed(Scope(persona.id, window[-1].user_id), conversation_id)
        speaker = next((message.speaker_name for message in reversed(window) if message.role == "user"), None)
        return self.greeting(persona.id, speaker)

    async def share(self, scope: Scope, request: str) -> str:
        """`/share [on|off|<memory id> [on|off]]`: what may come up in groups; returns what to tell the user."""
        return await asyncio.to_thread(self.sharing.answer, scope, request)

    async def memories(self, scope: Scope) -> list[MemoryRecord]:
        """`/memory`: what the companion remembers about this user, most important first."""
        return await asyncio.to_thread(self.knowledge.memories, scope, categories=["core", "fact", "episode"])

    async def why_listing(self, scope: Scope) -> str:
        """`/why`: what the companion had in mind for its last reply to this user (only their own scope)."""
        return await asyncio.to_thread(self.why.in_words, scope, self.user_settings.time_zone(scope))

    async def tokens_today(self, scope: Scope) -> tuple[int, int | None]:
        """The tokens this user's replies took today (their own day), and their daily quota (None: no limit)."""
        local_now = self.clock.now().astimezone(self.user_settings.time_zone(scope))
        spent = await asyncio.to_thread(self.quota.spent_today, scope, local_now)
        return spent, self.quota.limit(scope)

    async def memory_listing(self, scope: Scope) -> str:
        """`/memory`, as the user reads it: their profile and ongoing threads, their memories, dated in their time
        zone, and that zone."""
        zone = self.user_settings.time_zone(scope)
        chosen = self.user_settings.chosen_time_zone(scope) is not None
        profile = await asyncio.to_thread(self.journal.profiles.get, scope)
        threads = await asyncio.to_thread(self.journal.threads.active, scope)
        now = self.clock.now().astimezone(zone)
        text = None if profile is None else profile.text
        listing = phrasebook.memory_listing(await self.memories(scope), now, chosen, profile=text, threads=threads)
        linked = phrasebook.linked_identities(self.members(scope)) if is_person(scope.user_id) else ""
        return "\n".join(part for part in (listing, self.checkins.status(scope), linked) if part)

    async def checkins_command(self, scope: Scope, request: str, *, private_conversation: str | None = None) -> str:
        """`/checkins [on|off]`: whether the companion may write first; returns what to tell the user.

        `private_conversation`: where it was asked, when that is a private chat (check-ins may go there)."""
        if private_conversation is not None:
            self.checkins.user_wrote(scope, private_conversation, self.clock.now())
        return await self.checkins.command(scope, request)

    async def time_zone(self, scope: Scope, request: str) -> str:
        """`/timezone [Area/City]`: set the user's time zone, or say which it is; returns what to tell the user."""
        if request.strip():
            zone = find_time_zone(request)
            if zone is None:
                return phrasebook.unknown_time_zone(request.strip())
            self.user_settings.set_time_zone(scope, zone)
            return phrasebook.time_zone_set(self.clock.now().astimezone(zone))
        zone = self.user_settings.time_zone(scope)
        chosen = self.user_settings.chosen_time_zone(scope) is not None
        return phrasebook.time_zone_status(self.clock.now().astimezone(zone), chosen)

    # -- forgetting ------------------------------------------------------------------------------

    async def ask_to_forget(self, scope: Scope, what: str) -> ForgetQuestion | None:
        """`/forget <what>`: what it would forget, kept as a question whose answer any process may take (None if
        nothing matches)."""
        return await self.forgetting.ask(scope, what)

    async def forget_as_asked(self, key: str, user: UserRef) -> ForgetReport | None:
        """`/forget <what>`, confirmed by `user` (any identity of the person who asked): forget what question `key`
        found (None if it is unknown, expired, answered already or someone else's)."""
        return await self.forgetting.answered(key, self.links.person_of(str(user)))

    async def keep_as_asked(self, key: str) -> None:
        """`/forget <what>`, declined: the question goes, nothing else."""
        await self.forgetting.declined(key)

    async def forget_everything(self, scope: Scope) -> ForgetReport:
        """`/forget`, confirmed: every memory, message, change, job and file of the scope, whichever identity of
        the person asked. A person no persona remembers anything of any more is forgotten too: the links between
        their identities go, and each is a stranger again."""
        report = await self.forgetting.everything(scope)
        if is_person(scope.user_id) and not await asyncio.to_thread(self.joiner.holds_anything, scope.user_id):
            await asyncio.to_thread(self.links.forget, self.links.members(scope.user_id))
        return report

    # -- one person across platforms -------------------------------------------------------------

    def members(self, scope: Scope) -> list[UserRef]:
        """The identities whose memory `scope` is (a linked person's every identity; else the one)."""
        return [UserRef.parse(identity) for identity in self.links.members(scope.user_id)]

    async def link_code(self, user: UserRef) -> str:
        """`/link`: a one-time code for `user`'s other identity to send; returns what to tell the user."""
        code = await asyncio.to_thread(self.links.issue, str(user), self.clock.now())
        return phrasebook.link_code(code)

    async def link(self, user: UserRef, code: str) -> str:
        """`/link <code>` sent by `user`: the code's identity and theirs become one person, their memories one;
        returns what to tell the user."""
        result = await asyncio.to_thread(self.links.redeem, str(user), code, self.clock.now())
        if isinstance(result, Refusal):
            return phrasebook.link_refused(result.value)
        report = await self.join(result)
        return phrasebook.linked(self.links.members(result.person_id), report, already=result.already)

    async def join(self, joining: Joining) -> JoinReport:
        """Move what the joined users held into their person (a link, or the operator's `companion users link`)."""
        return await asyncio.to_thread(self.joiner.move, joining.movers, joining.person_id, self.clock.now())

    async def unlink(self, user: UserRef) -> str:
        """`/unlink` sent by `user`: this identity leaves its person and starts fresh, the memory stays with the
        others; returns what to tell the user."""
        person = await asyncio.to_thread(self.links.detach, str(user))
        return phrasebook.NOT_LINKED if person is None else phrasebook.unlinked(self.links.members(person))

    # -- check-ins -------------------------------------------------------------------------------

    def send_checkins_through(self, outbox: Outbox) -> None:
        """Check-ins for the users `outbox` reaches leave through it from now on (a platform adapter's own)."""
        self.checkins.add_outbox(outbox)

    def stop_checkins_through(self, outbox: Outbox) -> None:
        """No more check-ins through `outbox` (its platform stopped)."""
        self.checkins.remove_outbox(outbox)

    def send_due_checkins(self) -> int:
        """Start the check-ins whose time has come on the platforms this process sends on; returns how many."""
        return self.checkins.dispatch()

    async def send_checkins_due_for(self, scope: Scope) -> int:
        """Plan and send what is due for one user now (the terminal, as a chat starts); returns how many went out."""
        return await self.checkins.run_due_for(scope)

    async def search(
        self, scope: Scope, query: str, *, limit: int = 10, during: TimeWindow | None = None
    ) -> SearchResults:
        """Search what is remembered about this user: memories and past messages, each best first
        (given `during`, only what is from that stretch of time)."""
        return await asyncio.to_thread(
            search_scope, self.knowledge, self.history, scope, query, limit=limit, during=during
        )

    async def search_memories(
        self, scope: Scope, query: str, *, limit: int = 10, during: TimeWindow | None = None
    ) -> list[ScoredMemory]:
        """The memories of this scope that a message like `query` would recall, in prompt order (given
        `during`, only those from that stretch of time)."""
        hits = await asyncio.to_thread(
            self.knowledge.search, scope, query, limit=limit, categories=FORGETTABLE, during=during
        )
        return rank_for_prompt(hits, self.clock.now())


def _edited_words(text: str) -> str | None:
    """An edit's new words as they are kept, or None where they may not replace the old ones (empty, or absurdly
    long): the old wording stays, and nothing said is lost."""
    words = clean_text(text).strip()
    return words if words and len(words) <= MAX_MESSAGE_CHARS else None


def _notice(message: IncomingMessage, text: str) -> TurnResult:
    return TurnResult(message.conversation_id, reply=text, notice=text, completed=False)
