"""Messages a stop kept in a local file before they were stored, stored at the next start.

A bot holds messages it has received but not stored: those waiting for their turn behind a reply being
written, and during a database outage those it could not store. The first are written here as they arrive and
removed once their turn stores them, so a crash does not lose them; the others are written at a stop. One JSON
line each, in a file only its owner may read (it holds what people said). The next start stores them before
anything else (those stored already, by the platform's message id, only once) and empties the file. A forget of
a scope removes that scope's lines. A crash during an outage writes nothing more: what was held in memory then is
lost.

A line that cannot be read (damaged on disk, edited by hand, written by another version) blocks nothing: the
others are stored, it stays in the file for the operator to mend (its number is logged, never its text), and a
forget removes it, since nothing shows it belongs to another scope (one of a text, when it holds the text).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, astuple, dataclass, replace
from datetime import datetime
from pathlib import Path

from knowledge.records import Scope

log = logging.getLogger(__name__)

SPOOL_FILE = "held-messages.jsonl"
OWNER_ONLY = 0o600


@dataclass(frozen=True, slots=True)
class SpooledMessage:
    """A user's message as it was held: who said what, where and when, and whether in a group."""

    persona_id: str
    user_id: str
    conversation_id: str
    speaker_name: str
    text: str
    sent_at: str  # ISO 8601, aware
    source_id: str | None
    group: bool
    arrival: int = 0  # its place in the order messages arrived at the process that kept it (0: not said)

    @property
    def scope(self) -> Scope:
        return Scope(self.persona_id, self.user_id)


def in_order(kept: Iterable[SpooledMessage]) -> list[SpooledMessage]:
    """The messages kept in the order they were sent, those of one second in the order they arrived. A stop keeps
    the messages still waiting for their turn before those an outage held, which arrived first."""
    return sorted(kept, key=lambda message: (datetime.fromisoformat(message.sent_at), message.arrival))


class MessageSpool:
    """The spool file of a data directory."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / SPOOL_FILE
        self._lock = threading.Lock()

    def add(self, message: SpooledMessage) -> None:
        """Keep one more message, after those already kept."""
        with self._lock:
            self._write([*self._read(), message])

    def messages(self) -> list[SpooledMessage]:
        """The messages kept that can be read, in the order they were kept (`in_order`: as they arrived)."""
        with self._lock:
            return [line for line in self._read() if isinstance(line, SpooledMessage)]

    def remove(self, stored: Iterable[SpooledMessage]) -> None:
        """Drop these messages (stored now), also if edited since they were kept; the others, and lines that cannot
        be read, stay in their order."""
        with self._lock:
            gone = Counter(_key(message) for message in stored)
            left = []
            for line in self._read():
                if isinstance(line, SpooledMessage) and gone[_key(line)] > 0:
                    gone[_key(line)] -= 1
                else:
                    left.append(line)
            self._write(left)

    def change(self, source_id: str, text: str | None) -> int:
        """The message with this platform id was edited on its platform (`text`, its new words) or deleted (None)
        while it was kept; returns how many lines changed."""
        with self._lock:
            changed, left = 0, list[SpooledMessage | str]()
            for line in self._read():
                if isinstance(line, SpooledMessage) and line.source_id == source_id:
                    changed += 1
                    if text is not None:
                        left.append(replace(line, text=text))
                else:
                    left.append(line)
            if changed:
                self._write(left)
            return changed

    def forget(self, scope: Scope, said: Callable[[str], bool] | None = None) -> int:
        """Drop the messages of `scope` (given `said`, those whose text it matches), and the lines that cannot be
        read (given `said`, those it matches); returns how many went."""
        with self._lock:
            kept = self._read()
            left = [line for line in kept if not _forgotten(line, scope, said)]
            if len(left) != len(kept):
                self._write(left)
            return len(kept) - len(left)

    def _read(self) -> list[SpooledMessage | str]:
        """The file's lines: a message each, or the raw line where it cannot be read."""
        try:
            lines = self.path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
        except FileNotFoundError:
            return []
        read = [_message(line) for line in lines if line.strip()]
        unreadable = [number for number, line in enumerate(read, start=1) if isinstance(line, str)]
        if unreadable:
            log.error("%s: lines %s cannot be read; they stay until mended or forgotten", self.path, unreadable)
        return read

    def _write(self, lines: Iterable[SpooledMessage | str]) -> None:
        text = [line if isinstance(line, str) else json.dumps(asdict(line), ensure_ascii=False) for line in lines]
        if not text:
            self.path.unlink(missing_ok=True)
            return
        # Written whole, then renamed over the old file: a stop mid-write never leaves half a line.
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".held-")
        os.fchmod(handle, OWNER_ONLY)
        with os.fdopen(handle, "w", encoding="utf-8", errors="surrogateescape") as file:
            file.write("\n".join(text) + "\n")
        os.replace(temporary, self.path)


def _key(message: SpooledMessage) -> tuple[object, ...]:
    """What tells one kept message from another: its platform id and place in line, where it has them (its words
    may change while it is kept)."""
    if message.source_id is None:
        return astuple(message)
    return (message.user_id, message.source_id, message.arrival)


def _message(line: str) -> SpooledMessage | str:
    """The message a line keeps, or the line itself when it cannot be read."""
    try:
        line.encode("utf-8")  # bytes that are not UTF-8 (kept as they were read) raise here
        message = SpooledMessage(**json.loads(line))
        datetime.fromisoformat(message.sent_at)
    except (ValueError, TypeError):  # not UTF-8, not JSON, not an object, fields missing or unknown, no date
        return line
    return message


def _forgotten(line: SpooledMessage | str, scope: Scope, said: Callable[[str], bool] | None) -> bool:
    if isinstance(line, str):
        return said is None or said(line)
    return line.scope == scope and (said is None or said(line.text))
