"""The spool file: a line that cannot be read blocks neither the next start nor a forget, and a forget reaches it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from knowledge.conversations.spool import MessageSpool, SpooledMessage
from knowledge.records import Scope

ALICE = Scope("xiaoxiang", "telegram:1")
BOB = Scope("xiaoxiang", "telegram:2")
DAMAGED = [
    '{"persona_id": "xiaoxiang", "user_id": "telegram:1", "text": "my pin is QQP-31337',  # cut short
    '{"persona_id": "xiaoxiang", "user_id": "telegram:1", "text": "QQP-31337", "mood": "new field"}',
    "[1, 2, 3]",
]


def message(scope: Scope, text: str) -> SpooledMessage:
    return SpooledMessage(
        persona_id=scope.persona_id,
        user_id=scope.user_id,
        conversation_id=f"dm:{scope.user_id}",
        speaker_name="someone",
        text=text,
        sent_at="2026-11-27T20:00:00+00:00",
        source_id=None,
        group=False,
    )


def spool_with_damage(directory: Path) -> MessageSpool:
    spool = MessageSpool(directory)
    spool.add(message(BOB, "first"))
    with spool.path.open("ab") as file:
        file.write("\n".join(DAMAGED).encode() + b"\n\xff\xfe not utf-8\n")
    spool.add(message(BOB, "second"))
    return spool


def test_the_lines_that_can_be_read_are_stored_and_the_others_stay_for_the_operator(tmp_path: Path) -> None:
    spool = spool_with_damage(tmp_path)

    assert [kept.text for kept in spool.messages()] == ["first", "second"]
    spool.remove(spool.messages())  # both stored at the start

    assert spool.messages() == []
    assert spool.path.read_bytes() == "\n".join(DAMAGED).encode() + b"\n\xff\xfe not utf-8\n"


def test_a_forget_of_a_scope_removes_the_lines_that_cannot_be_read(tmp_path: Path) -> None:
    spool = spool_with_damage(tmp_path)

    assert spool.forget(ALICE) == len(DAMAGED) + 1

    assert b"QQP-31337" not in spool.path.read_bytes()
    assert [kept.text for kept in spool.messages()] == ["first", "second"]  # another scope's messages stay


def test_a_forget_of_a_text_removes_the_lines_that_cannot_be_read_only_where_they_hold_it(tmp_path: Path) -> None:
    spool = spool_with_damage(tmp_path)

    assert spool.forget(ALICE, lambda text: "QQP-31337" in text) == 2

    assert b"QQP-31337" not in spool.path.read_bytes()
    assert b"[1, 2, 3]" in spool.path.read_bytes()


def test_a_kept_message_edited_or_deleted_on_its_platform_is_kept_as_it_stands_and_still_leaves_once_stored(
    tmp_path: Path,
) -> None:
    spool = MessageSpool(tmp_path)
    flight, gate, other = (
        replace(message(ALICE, text), source_id=source, arrival=number)
        for number, (text, source) in enumerate(
            [("my flight is LH-4040", "telegram:1:7"), ("gate B12", "telegram:1:8"), ("hi", "telegram:2:9")], start=1
        )
    )
    for kept in (flight, gate, other):
        spool.add(kept)

    assert spool.change("telegram:1:7", "my flight leaves at 9") == 1  # the user took the number out
    assert spool.change("telegram:1:8", None) == 1  # and deleted this one
    assert spool.change("telegram:1:404", "nothing kept") == 0
    assert [kept.text for kept in spool.messages()] == ["my flight leaves at 9", "hi"]
    assert "LH-4040" not in spool.path.read_text(encoding="utf-8")

    spool.remove([flight])  # its turn stored it: the line goes, although its words changed since it was kept
    assert spool.messages() == [other]
