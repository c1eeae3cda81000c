"""Per-user settings: choices a user makes about how the companion treats them.

One row per scope (persona, user): a choice made with one persona is about that relationship, and
`/forget` (everything) forgets it with the rest of the scope. Each setting is a column read and
written through typed methods; a setting a user never chose reads as its default, which protects
them. A new setting is a new entry in `SETTING_COLUMNS`: SQLite files made before it get the column on open;
on PostgreSQL it takes a migration (`migrations/`).

The time zone is kept per scope too, not per platform user: it says where someone lives, and what a
user tells one persona must not reach another (docs/development/design-rules.md#scope); `/forget` forgets it
with the rest.
"""

from __future__ import annotations

import functools
import zoneinfo
from collections.abc import Iterable
from pathlib import Path
from zoneinfo import ZoneInfo

from knowledge.records import Scope
from knowledge.rules.discretion import Audience
from knowledge.sql.database import Database, opened, scope_conditions

_SCHEMA = """
CREATE TABLE IF NOT EXISTS user_settings (
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    PRIMARY KEY (persona_id, user_id)
);
"""
# column -> its SQL type; NULL always means "never chosen": the default applies
SETTING_COLUMNS = {
    "share_in_groups": "INTEGER",  # 1: everything said anywhere may be used in groups
    "time_zone": "TEXT",  # an IANA name chosen with /timezone; NULL: the operator's default
    "checkins": "INTEGER",  # 1/0: /checkins on|off (the companion may write first); NULL: the operator's default
}
UTC_ZONE = ZoneInfo("UTC")


class UserSettings:
    """The settings of every scope, in one table of the companion's database."""

    def __init__(self, where: Database | Path, *, default_time_zone: ZoneInfo = UTC_ZONE) -> None:
        """`where`: the database, or the path of an embedded SQLite file; `default_time_zone`: the zone of
        users who never chose one (`COMPANION_TIMEZONE`)."""
        self.default_time_zone = default_time_zone
        self._db = opened(where, _SCHEMA)
        self._db.add_columns("user_settings", SETTING_COLUMNS)

    def shares_in_groups(self, scope: Scope) -> bool:
        """Whether the user let everything they said (in private or another group) be used in groups; default no."""
        return bool(self._get(scope, "share_in_groups"))

    def set_shares_in_groups(self, scope: Scope, on: bool) -> None:
        """`/share on|off`."""
        self._set(scope, "share_in_groups", int(on))

    def audience(self, scope: Scope, conversation_id: str, *, group: bool) -> Audience:
        """Who reads what the companion recalls for this user in this conversation."""
        return Audience.of(conversation_id, group=group, shares_everything=group and self.shares_in_groups(scope))

    def time_zone(self, scope: Scope) -> ZoneInfo:
        """The user's time zone: the one they chose, else the operator's default."""
        return find_time_zone(self.chosen_time_zone(scope) or "") or self.default_time_zone

    def chosen_time_zone(self, scope: Scope) -> str | None:
        """The IANA name the user chose with `/timezone`, or None (the default applies)."""
        value = self._get(scope, "time_zone")
        return str(value) if value else None

    def set_time_zone(self, scope: Scope, zone: ZoneInfo) -> None:
        """`/timezone Area/City`."""
        self._set(scope, "time_zone", zone.key)

    def chosen_checkins(self, scope: Scope) -> bool | None:
        """Whether the user said `/checkins on` (True) or `off` (False); None: they never said (the default applies)."""
        value = self._get(scope, "checkins")
        return None if value is None else bool(value)

    def set_checkins(self, scope: Scope, on: bool) -> None:
        """`/checkins on|off`."""
        self._set(scope, "checkins", int(on))

    def chosen_checkins_of(self, scopes: Iterable[Scope]) -> dict[Scope, bool]:
        """`chosen_checkins` of many scopes at once; scopes that never chose are absent."""
        chosen: dict[Scope, bool] = {}
        for condition, params in scope_conditions(scopes):
            rows = self._db.query(
                f"SELECT persona_id, user_id, checkins FROM user_settings WHERE checkins IS NOT NULL AND {condition}",
                params,
            )
            chosen.update({Scope(persona_id, user_id): bool(on) for persona_id, user_id, on in rows})
        return chosen

    def forget(self, scope: Scope) -> int:
        """Drop every setting of the scope (they read as defaults again); returns how many rows went."""
        with self._db.transaction() as db:
            cursor = db.execute(
                "DELETE FROM user_settings WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
            )
        return cursor.rowcount

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def _get(self, scope: Scope, column: str) -> object:
        rows = self._db.query(
            f"SELECT {column} FROM user_settings WHERE persona_id = ? AND user_id = ?",
            (scope.persona_id, scope.user_id),
        )
        return rows[0][0] if rows else None

    def _set(self, scope: Scope, column: str, value: object) -> None:
        with self._db.transaction() as db:
            db.execute(
                f"INSERT INTO user_settings (persona_id, user_id, {column}) VALUES (?, ?, ?)"
                f" ON CONFLICT (persona_id, user_id) DO UPDATE SET {column} = excluded.{column}",
                (scope.persona_id, scope.user_id, value),
            )


@functools.cache
def _zone_names() -> dict[str, str]:
    """Every IANA zone this machine knows, by its lower-case name and, where unique, by its city."""
    names = {name.lower(): name for name in zoneinfo.available_timezones()}
    cities: dict[str, list[str]] = {}
    for name in names.values():
        if "/" in name and not name.startswith("Etc/"):
            cities.setdefault(name.rsplit("/", 1)[1].lower(), []).append(name)
    by_city = {city: found[0] for city, found in cities.items() if len(found) == 1 and city not in names}
    return {**by_city, **names}


def find_time_zone(name: str) -> ZoneInfo | None:
    """The IANA zone called `name` ("Europe/Berlin", any case; a unique city alone: "berlin", "new york")."""
    key = "_".join(name.strip().split()).lower()
    canonical = _zone_names().get(key) if key else None
    return None if canonical is None else ZoneInfo(canonical)
