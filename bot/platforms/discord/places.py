"""Who wrote and where, on Discord, as the companion names them: the references every store keys by are built
here and nowhere else ("discord:99", "discord:channel:42", "discord:thread:43", "discord:dm:7")."""

from __future__ import annotations

import discord

from bot.routing import Place
from core.types import ConversationRef, UserRef

PLATFORM = "discord"


def user_of(user: discord.abc.User) -> UserRef:
    """The person who wrote, asked or pressed."""
    return UserRef(PLATFORM, str(user.id))


def places_of(channel: discord.abc.Messageable) -> list[int]:
    """The ids of where a message was sent, most specific first (thread, channel, server); [] for a DM."""
    guild = getattr(channel, "guild", None)
    if guild is None:
        return []
    places = [channel.id]  # type: ignore[attr-defined]
    if isinstance(channel, discord.Thread) and channel.parent_id is not None:
        places.append(channel.parent_id)
    return [*places, guild.id]


def conversation_of(channel: discord.abc.Messageable) -> ConversationRef:
    """The conversation of a DM, a channel or a thread."""
    if isinstance(channel, discord.Thread):
        return ConversationRef(PLATFORM, "thread", str(channel.id))
    kind = "dm" if getattr(channel, "guild", None) is None else "channel"
    return ConversationRef(PLATFORM, kind, str(channel.id))  # type: ignore[attr-defined]


def place_of(channel: discord.abc.Messageable) -> Place:
    """Where a message was sent or a command given: private in a DM (which the operator's rules name by no id)."""
    ids = tuple(places_of(channel))
    return Place(conversation_of(channel), ids, private=not ids)


def source_of(message_id: int) -> str:
    """The message's unique id, for a second delivery, edits and deletes (Discord ids are unique across channels)."""
    return f"{PLATFORM}:{message_id}"
