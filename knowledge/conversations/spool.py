"""Messages a stop kept in a local file before they were stored, stored at the next start.

A bot that stops may hold messages it has received but not stored: those still waiting for their turn behind
a reply being written, and during a database outage those it could not store. It writes them here, in
the order they arrived, one JSON line each, in a file only its owner may read (it holds what people said).
The next start stores them before anything else and empties the file. A forget of a scope removes that
scope's lines. A crash during an outage writes nothing: what was held in memory then is lost.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from knowledge.records import Scope

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

    @property
    def scope(self) -> Scope:
        return Scope(self.persona_id, self.user_id)


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
        """The messages kept, in the order they arrived."""
        with self._lock:
            return self._read()

    def remove_first(self, count: int) -> None:
        """Drop the first `count` messages (stored now)."""
        with self._lock:
            self._write(self._read()[count:])

    def forget(self, scope: Scope, said: Callable[[str], bool] | None = None) -> int:
        """Drop the messages of `scope` (given `said`, those whose text it matches); returns how many went."""
        with self._lock:
            kept = self._read()
            left = [
                message for message in kept if message.scope != scope or (said is not None and not said(message.text))
            ]
            if len(left) != len(kept):
                self._write(left)
            return len(kept) - len(left)

    def _read(self) -> list[SpooledMessage]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        return [SpooledMessage(**json.loads(line)) for line in lines if line.strip()]

    def _write(self, messages: Iterable[SpooledMessage]) -> None:
        lines = [json.dumps(asdict(message), ensure_ascii=False) for message in messages]
        if not lines:
            self.path.unlink(missing_ok=True)
            return
        # Written whole, then renamed over the old file: a stop mid-write never leaves half a line.
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".held-")
        os.fchmod(handle, OWNER_ONLY)
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
        os.replace(temporary, self.path)
