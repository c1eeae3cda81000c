"""The values that cross the boundary between platform adapters and the turn pipeline."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeAlias

Role = Literal["chat", "monitor", "summarizer", "reviewer"]
ROLES: tuple[Role, ...] = ("chat", "monitor", "summarizer", "reviewer")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool the model asked to call: the call's id, the tool's name and its arguments (JSON text, as sent)."""

    id: str
    name: str
    arguments: str

    def as_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: its name, what it does and its parameters (a JSON schema)."""

    name: str
    description: str
    parameters: dict[str, Any]

    def as_openai(self) -> dict[str, Any]:
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": function}


Tools: TypeAlias = Sequence[ToolSpec]  # the tools offered to a model, in order


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a prompt, in the OpenAI chat format; a user message may carry one image, an assistant
    message the tools it called, a tool message the answer to one call."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    image_url: str | None = None  # a data URL ("data:image/jpeg;base64,..."), for models that see images
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant message: the calls it asked for
    tool_call_id: str | None = None  # a tool message: the call it answers

    def as_openai(self) -> dict[str, Any]:
        if self.tool_calls:
            calls = [call.as_openai() for call in self.tool_calls]
            return {"role": self.role, "content": self.content or None, "tool_calls": calls}
        if self.tool_call_id is not None:
            return {"role": self.role, "content": self.content, "tool_call_id": self.tool_call_id}
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
class RecallTrace:
    """One call of the `recall` tool, as a turn's trace keeps it: what was asked for (never the query's
    words) and the ids of what went back, or why nothing was searched."""

    kinds: tuple[str, ...]
    window: tuple[datetime, datetime] | None  # the time named, as computed
    memory_ids: tuple[str, ...] = ()
    message_ids: tuple[str, ...] = ()
    refused: str | None = None


@dataclass(frozen=True, slots=True)
class StoredTurn:
    """What an answered turn stored: the background's input, handed over once the reply is saved."""

    message_id: str  # the user's message in working memory
    reply_id: str  # the reply in working memory
    reply_text: str
    shown_ids: tuple[str, ...]  # memories the chat model saw (no system memories, none the budget dropped)
    recalls: tuple[RecallTrace, ...] = ()  # the model's calls of the `recall` tool, in order


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
    recalls: list[RecallTrace] = field(default_factory=list)  # the model's `recall` calls, as they happen

    async def text(self) -> str:
        """The whole reply, consuming the stream if there is one."""
        if isinstance(self.reply, str):
            return self.reply
        parts = [part async for part in self.reply]
        self.reply = "".join(parts)
        return self.reply
