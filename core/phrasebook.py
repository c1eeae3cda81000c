"""What the companion says about itself, the same on every platform: refusals, errors, what it
remembers and what it forgot. Adapters only render these texts (split them, add buttons); what is
particular to one platform (its commands, its buttons, its private chats) stays in its adapter.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowledge.message_log import StoredMessage
from knowledge.records import MemoryRecord

from .errors import LLMError

NOT_ALLOWED = "Sorry, I can't talk with you here: the person who runs me hasn't allowed it."
SOMETHING_BROKE = "Sorry, something went wrong on my side. Please try again in a moment."
EMPTY_MESSAGE = "I got an empty message. Did you mean to say something?"
LOST_WORDS = "Sorry, I lost my words for a moment. Your message is saved; say it again?"
NOTHING_REMEMBERED = "I don't remember anything about you yet."
FORGETTING_NOTHING = "Okay, I won't forget anything."


def apology(error: LLMError) -> str:
    """What the user reads when the model could not answer; their message is already saved."""
    return f"Sorry, I can't think straight right now: {error}. Your message is saved, so just try again in a moment."


def too_long(length: int, limit: int) -> str:
    """A message refused before it is stored: far longer than any chat message."""
    return (
        f"That message is too long for me ({length:,} characters; the limit is {limit:,}). Could you send it in parts?"
    )


def too_long_to_read(tokens: int, room: int) -> str:
    """A message that, with the persona around it, does not fit the model's context; it is not stored."""
    return (
        f"That message is too long for me to read in one go (about {tokens} tokens; I can take about {room}). "
        "Could you send it in shorter parts?"
    )


def too_fast(per_minute: int) -> str:
    """A message beyond the user's rate limit, answered without a model call."""
    return (
        f"You're writing faster than I can think (I read up to {per_minute} messages a "
        "minute). Give me a moment, then send that again?"
    )


def memory_listing(records: Sequence[MemoryRecord]) -> str:
    """`/memory`: what the companion remembers about the user, most important first."""
    if not records:
        return NOTHING_REMEMBERED
    lines = [f"[{record.category}] {record.content}  (importance {record.importance:.2f})" for record in records]
    return "What I remember about you:\n" + "\n".join(lines)


def nothing_about(what: str) -> str:
    """`/forget <what>` found nothing to forget."""
    return f"I don't remember anything about {what!r}."


def remembered(found: Sequence[MemoryRecord | StoredMessage]) -> str:
    """`/forget <what>`, before asking: the memories and past messages it would forget."""
    return "I remember this:\n" + "\n".join(f"- {item.content}" for item in found)


def forgot(count: int) -> str:
    """`/forget <what>`, once confirmed."""
    return f"Done. I forgot {count} memories."


def forgot_everything(memories: int, messages: int, about: str = "you") -> str:
    """`/forget`, once confirmed; `about` is how the user is named (in a group, by name)."""
    return f"Done. I forgot {memories} memories and {messages} messages about {about}."


def forget_everything_question(name: str | None = None) -> str:
    """`/forget`: the question before everything goes; addressed by `name` where others may read it."""
    question = "shall I forget everything I know about you? This cannot be undone."
    return f"{name}, {question}" if name else question[0].upper() + question[1:]
