"""Factories for the values adapters hand to the core."""

from __future__ import annotations

from datetime import UTC, datetime

from core.types import ConversationRef, IncomingMessage, UserRef


def make_message(
    text: str,
    *,
    user_id: str = "cli:alice",
    speaker_name: str = "Alice",
    conversation_id: str | None = None,
    persona_id: str | None = None,
    sent_at: datetime | None = None,
    source_id: str | None = None,
) -> IncomingMessage:
    """A message as an adapter would build it, from the ids the stores keep; the conversation defaults to a DM
    with the user."""
    return IncomingMessage(
        conversation=ConversationRef.parse(conversation_id or f"dm:{user_id}"),
        user=UserRef.parse(user_id),
        speaker_name=speaker_name,
        text=text,
        sent_at=sent_at or datetime.now(UTC),
        persona_id=persona_id,
        source_id=source_id,
    )
