"""Companion: the one entry point adapters call; a thin orchestrator over the roles in core/."""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from dataclasses import dataclass

from knowledge.history import ConversationHistory
from knowledge.journal import Journal
from knowledge.message_log import StoredMessage
from knowledge.ranking import rank_for_prompt
from knowledge.records import MemoryRecord, Scope, ScoredMemory
from knowledge.retrieval import FORGETTABLE, SearchResults, memories_about, messages_about, search_scope
from knowledge.store import KnowledgeBase
from knowledge.temporal import in_window
from knowledge.time_windows import TimeWindow
from knowledge.user_settings import UserSettings, find_time_zone
from personas.loader import Persona, PersonaError, PersonaRegistry

from . import phrasebook
from .clock import Clock
from .errors import UserFacingError
from .knowledge_monitor import Turn
from .memory_editor import MemoryEditor
from .memory_lifecycle import MemoryLifecycle
from .rate_limit import RateLimiter
from .response_handler import ResponseHandler
from .sharing import Sharing
from .tasks import BackgroundTasks
from .types import IncomingMessage, StoredTurn, TurnResult

log = logging.getLogger(__name__)

# Far beyond any chat message; above this we refuse before storing, so one paste cannot fill the disk.
MAX_MESSAGE_CHARS = 100_000


class UnknownPersonaError(UserFacingError):
    """The requested persona does not exist or its file is broken."""


@dataclass(frozen=True, slots=True)
class ForgetReport:
    """What `/forget` deleted, layer by layer."""

    memories: int
    messages: int
    journal_rows: int


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
        clock: Clock,
        default_persona: str,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self.personas = personas
        self.history = history
        self.knowledge = knowledge
        self.responses = responses
        self.lifecycle = lifecycle
        self.journal = journal
        self.clock = clock
        self.default_persona = default_persona
        self.user_settings = user_settings
        self.editor = MemoryEditor(knowledge, journal.changes, clock)
        self.sharing = Sharing(knowledge, user_settings, self.editor)
        self._rate_limiter = rate_limiter or RateLimiter(clock, per_minute=0)

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
        if not text:
            return _notice(message, phrasebook.EMPTY_MESSAGE)
        if len(text) > MAX_MESSAGE_CHARS:
            return _notice(message, phrasebook.too_long(len(text), MAX_MESSAGE_CHARS))
        if not self._rate_limiter.allow(message.user_id):
            return _notice(message, phrasebook.too_fast(self._rate_limiter.per_minute))
        persona = self.persona(message.persona_id)
        scope = Scope(persona.id, message.user_id)
        remember = functools.partial(self._remember, persona, scope, message, group)
        # discretion: in a group only what was learned there, or what the user shared
        audience = self.user_settings.audience(scope, message.conversation_id, group=group)
        zone = self.user_settings.time_zone(scope)  # "now", "yesterday" and plans are the user's own
        return await self.responses.reply(
            persona, scope, message, group=group, audience=audience, zone=zone, on_stored=remember
        )

    def _remember(
        self, persona: Persona, scope: Scope, message: IncomingMessage, group: bool, stored: StoredTurn
    ) -> None:
        """Hand a turn whose reply was delivered and stored to the background."""
        turn = Turn(
            user_text=message.text,
            reply_text=stored.reply_text,
            speaker_name=message.speaker_name,
            persona_name=persona.name,
            user_title=persona.title_for(message.speaker_name),
            shown_ids=stored.shown_ids,
            conversation_id=message.conversation_id,
            message_ids=(stored.message_id, stored.reply_id),
            group=group,
            sent_at=message.sent_at.isoformat(),
        )
        self.lifecycle.turn_finished(scope, turn)

    async def message_edited(self, source_id: str, text: str) -> bool:
        """A message was edited on its platform: the conversation and its history keep the new wording.

        Nothing is re-answered (the reply stays as it was), and memories already drawn from the old
        wording stay until corrected or forgotten. Whether the message was one we keep is returned.
        """
        text = text.strip()
        if not text or len(text) > MAX_MESSAGE_CHARS:
            return False  # the stored wording stays; nothing said is lost
        return await asyncio.to_thread(self.history.edit, source_id, text) is not None

    async def message_deleted(self, source_id: str) -> bool:
        """A message was deleted on its platform: it leaves the conversation and its history here too."""
        return await asyncio.to_thread(self.history.delete, source_id)

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
            self.lifecycle.conversation_overflowed(Scope(persona.id, window[-1].user_id), conversation_id)
        speaker = next((message.speaker_name for message in reversed(window) if message.role == "user"), None)
        return self.greeting(persona.id, speaker)

    async def share(self, scope: Scope, request: str) -> str:
        """`/share [on|off|<memory id> [on|off]]`: what may come up in groups; returns what to tell the user."""
        return await asyncio.to_thread(self.sharing.answer, scope, request)

    async def memories(self, scope: Scope) -> list[MemoryRecord]:
        """`/memory`: what the companion remembers about this user, most important first."""
        return await asyncio.to_thread(self.knowledge.list, scope, categories=["core", "fact", "episode"])

    async def memory_listing(self, scope: Scope) -> str:
        """`/memory`, as the user reads it: their memories, dated in their time zone, and that zone."""
        zone = self.user_settings.time_zone(scope)
        chosen = self.user_settings.chosen_time_zone(scope) is not None
        return phrasebook.memory_listing(await self.memories(scope), self.clock.now().astimezone(zone), chosen)

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
        matching = None if during is None else functools.partial(in_window, window=during)
        hits = await asyncio.to_thread(
            self.knowledge.search, scope, query, limit=limit, categories=FORGETTABLE, matching=matching
        )
        return rank_for_prompt(hits, self.clock.now())

    async def memories_about(self, scope: Scope, what: str) -> list[MemoryRecord | StoredMessage]:
        """`/forget <what>`, first step: the memories and past messages it would delete, to show before asking."""
        memories: list[MemoryRecord | StoredMessage] = []
        memories += await asyncio.to_thread(memories_about, self.knowledge, scope, what)
        memories += await asyncio.to_thread(messages_about, self.history, scope, what)
        return memories

    async def forget_memories(self, scope: Scope, ids: list[str], *, actor: str = "user") -> int:
        """`/forget <what>`, once confirmed: delete these memories and messages of this scope (others' ids: nothing)."""
        memories = await asyncio.to_thread(self.editor.forget, scope, ids, actor=actor)
        return memories + await asyncio.to_thread(self.history.forget_messages, scope, ids)

    async def forget_everything(self, scope: Scope) -> ForgetReport:
        """`/forget`: delete every memory, message (and its index), history row and pending job of this scope."""
        await self.tasks.discard(scope)  # queued work must not re-add what we are about to delete
        memories = await asyncio.to_thread(self.knowledge.forget_all, scope)
        messages = await asyncio.to_thread(self.history.forget, scope)
        journal_rows = self.journal.forget(scope)
        self.user_settings.forget(scope)  # choices such as /share read as their defaults again
        log.info("forgot %d memories, %d messages and %d journal rows of one scope", memories, messages, journal_rows)
        return ForgetReport(memories=memories, messages=messages, journal_rows=journal_rows)


def _notice(message: IncomingMessage, text: str) -> TurnResult:
    return TurnResult(message.conversation_id, reply=text, notice=text, completed=False)
