"""The values that cross the boundary between platform adapters and the turn pipeline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

Role = Literal["chat", "monitor", "summarizer", "reviewer"]
ROLES: tuple[Role, ...] = ("chat", "monitor", "summarizer", "reviewer")


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a prompt, in the OpenAI chat format."""

    role: Literal["system", "user", "assistant"]
    content: str

    def as_openai(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """A message a person sent, already translated from its platform."""

    conversation_id: str  # "telegram:chat:-1001", "discord:channel:42", "cli:alice"
    user_id: str  # platform-qualified: "telegram:7", "discord:99", "cli:alice"
    speaker_name: str
    text: str
    sent_at: datetime  # aware, UTC
    persona_id: str | None = None  # None: the default persona
    source_id: str | None = None  # the platform's unique message id ("discord:123"), for later edits and deletes


@dataclass(slots=True)
class TurnResult:
    """What the companion answers to one message; adapters render it for their platform."""

    conversation_id: str
    reply: AsyncIterator[str] | str
    notice: str | None = None  # something the user should know (an error, a trimmed message)
    completed: bool = True  # False when the reply is an apology instead of an answer
    metadata: dict[str, object] = field(default_factory=dict)

    async def text(self) -> str:
        """The whole reply, consuming the stream if there is one."""
        if isinstance(self.reply, str):
            return self.reply
        parts = [part async for part in self.reply]
        self.reply = "".join(parts)
        return self.reply
