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
class UserRef:
    """Someone on a platform. Its text (`str`) is how every store keys them: "telegram:7", "discord:99",
    "cli:alice"; an adapter builds one where a person reaches it, and `parse` reads a stored one back."""

    platform: str  # "telegram", "discord", "cli"
    id: str  # the platform's own id of the person (a number on Telegram and Discord, a name in the terminal)

    def __str__(self) -> str:
        return f"{self.platform}:{self.id}"

    @classmethod
    def parse(cls, text: str) -> UserRef:
        """The reference a stored user id names (the inverse of `str`)."""
        platform, _, own = text.partition(":")
        if not platform or not own:
            raise ValueError(f"not a platform-qualified user id: {text!r}")
        return cls(platform, own)


@dataclass(frozen=True, slots=True)
class ConversationRef:
    """A conversation on a platform. Its text (`str`) is how every store keys it: "telegram:chat:-1001",
    "discord:channel:42", "discord:thread:43", "discord:dm:7", "cli:alice" (the terminal's have no kind);
    an adapter builds one where a message arrives, and `parse` reads a stored one back."""

    platform: str
    kind: str  # "chat", "channel", "thread", "dm"; "" for the terminal
    id: str  # the platform's own id of the chat, channel or thread (the user's name in the terminal)

    def __str__(self) -> str:
        return f"{self.platform}:{self.kind}:{self.id}" if self.kind else f"{self.platform}:{self.id}"

    @classmethod
    def parse(cls, text: str) -> ConversationRef:
        """The reference a stored conversation id names (the inverse of `str`)."""
        parts = text.split(":", 2)
        if len(parts) < 2 or not all(parts):
            raise ValueError(f"not a platform-qualified conversation id: {text!r}")
        return cls(parts[0], parts[1], parts[2]) if len(parts) == 3 else cls(parts[0], "", parts[1])


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """A message a person sent, already translated from its platform; its text is cleaned on the way in."""

    conversation: ConversationRef
    user: UserRef
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

    @property
    def conversation_id(self) -> str:
        """The conversation as the stores key it ("telegram:chat:-1001")."""
        return str(self.conversation)

    @property
    def user_id(self) -> str:
        """The sender as the stores key them ("telegram:7")."""
        return str(self.user)


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
