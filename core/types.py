"""The values that cross the boundary between platform adapters and the turn pipeline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Role = Literal["chat", "monitor", "summarizer", "reviewer"]
ROLES: tuple[Role, ...] = ("chat", "monitor", "summarizer", "reviewer")


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a prompt, in the OpenAI chat format; a user message may carry one image."""

    role: Literal["system", "user", "assistant"]
    content: str
    image_url: str | None = None  # a data URL ("data:image/jpeg;base64,..."), for models that see images

    def as_openai(self) -> dict[str, Any]:
        if self.image_url is None:
            return {"role": self.role, "content": self.content}
        parts: list[dict[str, Any]] = [{"type": "text", "text": self.content}] if self.content else []
        parts.append({"type": "image_url", "image_url": {"url": self.image_url}})
        return {"role": self.role, "content": parts}


@dataclass(frozen=True, slots=True)
class Image:
    """An image a person sent, as the platform delivered it; never stored unless the operator asks."""

    data: bytes = field(repr=False)
    mime: str  # "image/jpeg", "image/png", ...


def clean_text(text: str) -> str:
    """Text as it can be stored and sent: lone surrogates (a broken emoji from a client, undecodable bytes
    read with `surrogateescape`) become U+FFFD, so bad input is shown as "�" instead of failing the turn."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """A message a person sent, already translated from its platform; its text is cleaned on the way in."""

    conversation_id: str  # "telegram:chat:-1001", "discord:channel:42", "cli:alice"
    user_id: str  # platform-qualified: "telegram:7", "discord:99", "cli:alice"
    speaker_name: str
    text: str
    sent_at: datetime  # aware, UTC
    persona_id: str | None = None  # None: the default persona
    source_id: str | None = None  # the platform's unique message id ("discord:123"), for later edits and deletes
    image: Image | None = None  # a photo sent with the message; `text` is then its caption (maybe empty)

    def __post_init__(self) -> None:
        # Every adapter builds one of these: the one place where text from outside is made safe to keep.
        object.__setattr__(self, "text", clean_text(self.text))
        object.__setattr__(self, "speaker_name", clean_text(self.speaker_name))


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """What an answered turn stored: the background's input, handed over once the reply is saved."""

    message_id: str  # the user's message in working memory
    reply_id: str  # the reply in working memory
    reply_text: str
    shown_ids: tuple[str, ...]  # memories the chat model saw (no system memories, none the budget dropped)


@dataclass(slots=True)
class TurnResult:
    """What the companion answers to one message; adapters render it for their platform.

    A streamed reply is stored once the stream has been consumed to its end; `stored` then says what
    was stored (None while streaming, and for apologies and notices, which store no answer).
    """

    conversation_id: str
    reply: AsyncIterator[str] | str
    notice: str | None = None  # something the user should know (an error, a trimmed message)
    completed: bool = True  # False when the reply is an apology instead of an answer
    stored: StoredTurn | None = None

    async def text(self) -> str:
        """The whole reply, consuming the stream if there is one."""
        if isinstance(self.reply, str):
            return self.reply
        parts = [part async for part in self.reply]
        self.reply = "".join(parts)
        return self.reply
