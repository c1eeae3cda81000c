"""Messages the disk refused are held in order for a bounded time; what cannot be kept is said to be lost."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest

from core.types import IncomingMessage
from core.unsaved_messages import UnsavedMessages
from knowledge.records import Scope
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message

ALICE = Scope("xiaoxiang", "cli:alice")


class Disk:
    """Where held messages go once there is room; full until told otherwise (SQLite's own error)."""

    def __init__(self) -> None:
        self.full = True
        self.stored: list[str] = []

    def store(self, persona_id: str, scope: Scope, message: IncomingMessage, group: bool) -> None:
        if self.full:
            raise sqlite3.OperationalError("database or disk is full")
        self.stored.append(message.text + (" (in a group)" if group else ""))


def test_held_messages_are_stored_in_order_once_there_is_room(clock: FakeClock) -> None:
    disk = Disk()
    unsaved = UnsavedMessages(disk.store, clock)
    for text, group in (("one", False), ("two", True)):
        unsaved.hold("xiaoxiang", ALICE, make_message(text), group=group)
    assert not unsaved.save() and len(unsaved) == 2
    disk.full = False
    assert unsaved.save() and disk.stored == ["one", "two (in a group)"] and len(unsaved) == 0


def test_messages_held_too_long_or_at_shutdown_are_reported_lost(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    unsaved = UnsavedMessages(Disk().store, clock, keep_for=timedelta(hours=1))
    unsaved.hold("xiaoxiang", ALICE, make_message("old"), group=False)
    clock.advance(hours=2)
    unsaved.hold("xiaoxiang", ALICE, make_message("recent"), group=False)
    assert not unsaved.save() and len(unsaved) == 1
    assert "1 held messages are lost" in caplog.text
    assert unsaved.give_up() == 1 and "1 messages could not be stored and are lost" in caplog.text


def test_a_failure_that_is_not_storage_is_not_swallowed(clock: FakeClock) -> None:
    def broken(persona_id: str, scope: Scope, message: IncomingMessage, group: bool) -> None:
        raise ValueError("a bug")

    unsaved = UnsavedMessages(broken, clock)
    unsaved.hold("xiaoxiang", ALICE, make_message("one"), group=False)
    with pytest.raises(ValueError):
        unsaved.save()
