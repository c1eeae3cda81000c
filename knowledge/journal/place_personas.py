"""Personas chosen per place with `/persona`, in the shared database (server mode).

Embedded, the choices are a small JSON file per platform in the data directory (`bot/routing.py`);
with several bot processes they live here, so a choice made through one process is what every
process answers with at the next message.
"""

from __future__ import annotations

from collections.abc import Sequence

from knowledge.sql.database import Database


class PlacePersonas:
    """One platform's `/persona` choices: place id -> persona id."""

    def __init__(self, db: Database, platform: str) -> None:
        self._db = db
        self._platform = platform

    def get(self, places: Sequence[int]) -> str | None:
        """The persona chosen for the most specific of `places` that has one."""
        if not places:
            return None
        marks = ",".join("?" * len(places))
        rows = self._db.query(
            f"SELECT place, persona_id FROM persona_choices WHERE platform = ? AND place IN ({marks})",
            (self._platform, *places),
        )
        chosen = {row["place"]: row["persona_id"] for row in rows}
        return next((chosen[place] for place in places if place in chosen), None)

    def set(self, place: int, persona_id: str | None) -> None:
        """Choose a persona for a place; None goes back to the configured one."""
        with self._db.transaction() as db:
            if persona_id is None:
                db.execute("DELETE FROM persona_choices WHERE platform = ? AND place = ?", (self._platform, place))
            else:
                db.execute(
                    "INSERT INTO persona_choices (platform, place, persona_id) VALUES (?, ?, ?)"
                    " ON CONFLICT (platform, place) DO UPDATE SET persona_id = excluded.persona_id",
                    (self._platform, place, persona_id),
                )

    def all(self) -> dict[int, str]:
        """Every choice of the platform (for `companion migrate`)."""
        rows = self._db.query("SELECT place, persona_id FROM persona_choices WHERE platform = ?", (self._platform,))
        return {row["place"]: row["persona_id"] for row in rows}
