"""Companion: the one entry point adapters call; a thin orchestrator over the roles in core/."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass

from knowledge.records import MemoryRecord, Scope
from knowledge.store import KnowledgeBase
from personas.loader import Persona, PersonaError, PersonaRegistry

from .clock import Clock
from .errors import UserFacingError
from .response_handler import ResponseHandler
from .types import IncomingMessage, TurnResult

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


class Companion:
    """Handles messages and commands for every persona, user and conversation."""

    def __init__(
        self,
        *,
        personas: PersonaRegistry,
        knowledge: KnowledgeBase,
        responses: ResponseHandler,
        clock: Clock,
        default_persona: str,
    ) -> None:
        self.personas = personas
        self.knowledge = knowledge
        self.responses = responses
        self.clock = clock
        self.default_persona = default_persona

    def persona(self, persona_id: str | None = None) -> Persona:
        """The persona by id (default persona when None), with a clear error when it cannot be used."""
        try:
            return self.personas.get(persona_id or self.default_persona)
        except PersonaError as error:
            raise UnknownPersonaError(str(error)) from error

    def scope(self, message: IncomingMessage) -> Scope:
        """The (persona, user) scope a message belongs to."""
        return Scope(self.persona(message.persona_id).id, message.user_id)

    async def handle(self, message: IncomingMessage, *, group: bool = False) -> TurnResult:
        """Answer one chat message. Empty or absurdly long input gets a clear answer, not an LLM call."""
        text = message.text.strip()
        if not text:
            return _notice(message, "I got an empty message. Did you mean to say something?")
        if len(text) > MAX_MESSAGE_CHARS:
            return _notice(
                message,
                f"That message is too long for me ({len(text):,} characters; the limit is "
                f"{MAX_MESSAGE_CHARS:,}). Could you send it in parts?",
            )
        persona = self.persona(message.persona_id)
        scope = Scope(persona.id, message.user_id)
        return await self.responses.reply(persona, scope, message, group=group)

    def greeting(self, persona_id: str | None = None) -> str:
        """One of the persona's greetings."""
        return random.choice(self.persona(persona_id).greetings)

    async def new_conversation(self, persona_id: str | None, conversation_id: str) -> str:
        """`/new`: close the conversation's window and greet anew."""
        persona = self.persona(persona_id)
        self.responses.working_memory.close_window(persona.id, conversation_id)
        return self.greeting(persona.id)

    async def memories(self, scope: Scope) -> list[MemoryRecord]:
        """`/memory`: what the companion remembers about this user, most important first."""
        return await asyncio.to_thread(self.knowledge.list, scope, categories=["core", "fact", "episode"])

    async def forget_everything(self, scope: Scope) -> ForgetReport:
        """`/forget`: delete every memory and every stored message of this scope, for real."""
        memories = await asyncio.to_thread(self.knowledge.forget_all, scope)
        messages = self.responses.working_memory.forget(scope)
        log.info("forgot %d memories and %d messages of one scope", memories, messages)
        return ForgetReport(memories=memories, messages=messages)


def _notice(message: IncomingMessage, text: str) -> TurnResult:
    return TurnResult(message.conversation_id, reply=text, notice=text, completed=False)
