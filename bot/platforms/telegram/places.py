"""Who wrote and where, on Telegram, as the companion names them: the references every store keys by are
built here and nowhere else ("telegram:7", "telegram:chat:-1001")."""

from __future__ import annotations

from telegram import Chat, Message, User
from telegram.constants import ChatType

from bot.routing import Place
from core.types import ConversationRef, UserRef

PLATFORM = "telegram"


def user_of(user: User) -> UserRef:
    """The person who wrote or pressed."""
    return UserRef(PLATFORM, str(user.id))


def chat_conversation(chat_id: int) -> ConversationRef:
    """The conversation of a chat (a private chat's id is its user's)."""
    return ConversationRef(PLATFORM, "chat", str(chat_id))


def place_of(chat: Chat) -> Place:
    """Where a message was sent: the chat, named by its id in the operator's rules."""
    return Place(chat_conversation(chat.id), (chat.id,), private=chat.type == ChatType.PRIVATE)


def is_group(chat: Chat) -> bool:
    """Whether others read the chat too (a group or supergroup; a channel has nobody to talk to)."""
    return chat.type in (ChatType.GROUP, ChatType.SUPERGROUP)


def source_of(message: Message) -> str:
    """The message's unique id, for a second delivery, edits and deletes (message ids are unique per chat only)."""
    return f"{PLATFORM}:{message.chat.id}:{message.message_id}"
