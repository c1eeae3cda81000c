"""The references of who and where: built by the adapters, kept by the stores as the same text as ever."""

from __future__ import annotations

import pytest

from core.types import ConversationRef, UserRef


@pytest.mark.parametrize(
    ("stored", "ref"),
    [
        ("telegram:7", UserRef("telegram", "7")),
        ("discord:99", UserRef("discord", "99")),
        ("cli:alice", UserRef("cli", "alice")),
        ("cli:a:b", UserRef("cli", "a:b")),  # a terminal name may hold a colon
    ],
)
def test_a_user_reference_is_the_text_the_stores_keep(stored: str, ref: UserRef) -> None:
    assert str(ref) == stored and UserRef.parse(stored) == ref


@pytest.mark.parametrize(
    ("stored", "ref"),
    [
        ("telegram:chat:-1001", ConversationRef("telegram", "chat", "-1001")),
        ("discord:channel:42", ConversationRef("discord", "channel", "42")),
        ("discord:thread:43", ConversationRef("discord", "thread", "43")),
        ("discord:dm:7", ConversationRef("discord", "dm", "7")),
        ("cli:alice", ConversationRef("cli", "", "alice")),
    ],
)
def test_a_conversation_reference_is_the_text_the_stores_keep(stored: str, ref: ConversationRef) -> None:
    assert str(ref) == stored and ConversationRef.parse(stored) == ref


@pytest.mark.parametrize("text", ["", "alice", ":7", "telegram:"])
def test_what_names_no_platform_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="platform-qualified"):
        UserRef.parse(text)
    with pytest.raises(ValueError, match="platform-qualified"):
        ConversationRef.parse(text)
