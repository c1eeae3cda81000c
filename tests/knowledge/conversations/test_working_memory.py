"""Working memory on either backend: bounded windows, nothing lost, forgetting for real."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from knowledge.conversations.message_log import MessageLog
from knowledge.conversations.working_memory import WorkingMemory
from knowledge.records import Scope
from tests.conftest import Backend

AT = datetime(2026, 1, 3, 18, 0, tzinfo=UTC)


def say(memory: WorkingMemory, text: str, *, user: str = "cli:alice", role: str = "user", conversation: str = "c1"):
    return memory.append(
        "xiaoxiang",
        conversation,
        role=role,
        user_id=user,
        speaker_name=user,
        content=text,
        sent_at=AT,  # type: ignore[arg-type]
    )


def test_window_keeps_the_newest_messages_and_archives_the_rest(backend: Backend) -> None:
    memory = WorkingMemory(MessageLog(backend.open()), window_size=30)
    for index in range(35):
        say(memory, f"message {index}")
    window = memory.window("xiaoxiang", "c1")
    assert [message.content for message in window] == [f"message {index}" for index in range(5, 35)]
    assert [message.content for message in memory.archived("xiaoxiang", "c1")] == [
        f"message {index}" for index in range(5)
    ]


def test_a_full_window_lets_its_oldest_messages_go_in_one_batch(backend: Backend) -> None:
    memory = WorkingMemory(MessageLog(backend.open()), window_size=30, overflow_batch=10)
    for index in range(30):
        say(memory, f"message {index}")
    assert memory.archived("xiaoxiang", "c1") == []
    say(memory, "message 30")
    assert [message.content for message in memory.archived("xiaoxiang", "c1")] == [f"message {i}" for i in range(10)]
    assert len(memory.window("xiaoxiang", "c1")) == 21


def test_messages_survive_a_restart(backend: Backend) -> None:
    first = WorkingMemory(MessageLog(backend.open()))
    stored = say(first, "remember me")
    first.close()
    again = WorkingMemory(MessageLog(backend.open()))
    assert again.window("xiaoxiang", "c1") == [stored]


def test_new_conversation_empties_the_window_but_keeps_the_messages(backend: Backend) -> None:
    memory = WorkingMemory(MessageLog(backend.open()))
    say(memory, "hello")
    assert memory.close_window("xiaoxiang", "c1") == 1
    assert memory.window("xiaoxiang", "c1") == []
    assert [message.content for message in memory.archived("xiaoxiang", "c1")] == ["hello"]


def test_conversations_and_personas_have_separate_windows(backend: Backend) -> None:
    memory = WorkingMemory(MessageLog(backend.open()))
    say(memory, "in c1")
    say(memory, "in c2", conversation="c2")
    memory.append("other", "c1", role="user", user_id="cli:alice", speaker_name="a", content="x", sent_at=AT)
    assert [message.content for message in memory.window("xiaoxiang", "c1")] == ["in c1"]
    assert [message.content for message in memory.window("xiaoxiang", "c2")] == ["in c2"]


def test_forget_deletes_only_that_scope(backend: Backend) -> None:
    memory = WorkingMemory(MessageLog(backend.open()))
    say(memory, "alice speaks", conversation="group")
    say(memory, "reply to alice", role="assistant", conversation="group")
    say(memory, "bob speaks", user="cli:bob", conversation="group")
    assert memory.log.forget(Scope("xiaoxiang", "cli:alice")) == 2
    assert [message.content for message in memory.window("xiaoxiang", "group")] == ["bob speaks"]
    assert memory.log.count(Scope("xiaoxiang", "cli:alice")) == 0


def test_an_edit_changes_only_the_message_with_that_platform_id(backend: Backend) -> None:
    memory = WorkingMemory(MessageLog(backend.open()))
    memory.append(
        "p", "c1", role="user", user_id="u1", speaker_name="A", content="see you at 5", sent_at=AT, source_id="m1"
    )
    memory.append(
        "p", "c2", role="user", user_id="u1", speaker_name="A", content="other chat", sent_at=AT, source_id="m2"
    )
    memory.append("p", "c1", role="assistant", user_id="u1", speaker_name="P", content="ok", sent_at=AT)
    edited = memory.log.edit("m1", "see you at 6")
    assert edited is not None and edited.content == "see you at 6"
    assert memory.log.edit("unknown", "x") is None
    assert [m.content for m in memory.window("p", "c1")] == ["see you at 6", "ok"]
    assert [m.content for m in memory.window("p", "c2")] == ["other chat"]


def test_a_message_is_found_by_its_platform_id(backend: Backend) -> None:
    memory = WorkingMemory(MessageLog(backend.open()))
    stored = memory.append(
        "p", "c1", role="user", user_id="u1", speaker_name="A", content="hi", sent_at=AT, source_id="m1"
    )
    assert memory.log.by_source("m1") == stored
    assert memory.log.by_source("m2") is None


def test_a_database_from_before_platform_ids_is_migrated_without_losing_messages(tmp_path: Path) -> None:
    path = tmp_path / "wm.sqlite3"
    with sqlite3.connect(path) as db:  # the table as it was before `source_id`
        db.execute(
            "CREATE TABLE messages (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,"
            " persona_id TEXT NOT NULL, conversation_id TEXT NOT NULL, user_id TEXT NOT NULL, role TEXT NOT NULL,"
            " speaker_name TEXT NOT NULL, content TEXT NOT NULL, sent_at TEXT NOT NULL,"
            " state TEXT NOT NULL DEFAULT 'window')"
        )
        db.execute(
            "INSERT INTO messages (id, persona_id, conversation_id, user_id, role, speaker_name, content, sent_at)"
            " VALUES ('msg_old', 'p', 'c1', 'u1', 'user', 'A', 'from before', ?)",
            (AT.isoformat(),),
        )
    memory = WorkingMemory(MessageLog(path))
    memory.append("p", "c1", role="user", user_id="u1", speaker_name="A", content="new", sent_at=AT, source_id="m9")
    assert memory.log.edit("m9", "newer") is not None
    assert [m.content for m in memory.window("p", "c1")] == ["from before", "newer"]


def test_the_reply_before_a_message_is_the_personas_last_one_in_its_conversation_before_it(backend: Backend) -> None:
    memory = WorkingMemory(MessageLog(backend.open()))
    first = say(memory, "hi")
    say(memory, "How was your day?", role="assistant")
    say(memory, "Are you moving?", role="assistant")
    say(memory, "Shall I remind you?", role="assistant", conversation="c2")  # another conversation
    said = say(memory, "yes")
    say(memory, "Great!", role="assistant")  # after it
    assert memory.log.reply_before(first.id) is None
    before = memory.log.reply_before(said.id)
    assert before is not None and (before.content, before.conversation_id) == ("Are you moving?", "c1")
