"""Scheduled passes run once per time slot, however many processes' schedulers fire for it.

Every bot process runs the same scheduler (daily decay, the idle pass, pruning); with several
processes sharing one store each pass must still run once. The slot a firing belongs to (the
minute a cron fires in, an interval's bucket) is claimed here in one conditional upsert: the first
process to claim it runs the pass, the others find it taken and skip. A pass that fails keeps its
slot (decay is a function of time: the next slot does what this one missed).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from knowledge.sql.database import Database, iso, opened

_SCHEMA = """
CREATE TABLE IF NOT EXISTS scheduled_passes (
    name TEXT PRIMARY KEY,
    last_slot TEXT NOT NULL   -- the start of the last time slot the pass was claimed for
);
"""


class ScheduledPasses:
    """The last slot each named pass was claimed for."""

    def __init__(self, where: Database | Path) -> None:
        self._db = opened(where, _SCHEMA)

    def claim(self, name: str, slot: datetime) -> bool:
        """Claim the pass `name` for the slot starting at `slot`: True for exactly one caller per slot."""
        with self._db.transaction() as db:
            claimed = db.execute(
                "INSERT INTO scheduled_passes (name, last_slot) VALUES (?, ?) ON CONFLICT (name) DO UPDATE"
                " SET last_slot = excluded.last_slot WHERE scheduled_passes.last_slot < excluded.last_slot",
                (name, iso(slot)),
            )
            return claimed.rowcount == 1

    def last(self, name: str) -> datetime | None:
        """The start of the last slot the pass `name` was claimed for; None if it never was."""
        rows = self._db.query("SELECT last_slot FROM scheduled_passes WHERE name = ?", (name,))
        return datetime.fromisoformat(rows[0]["last_slot"]) if rows else None

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()
