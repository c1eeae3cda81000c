"""The check-in log: where check-ins may go, which are planned, and what became of each.

- A *contact* is a scope's private conversation (a Telegram private chat, a Discord DM, the terminal):
  where check-ins go, when the user last wrote there, and how many check-ins went unanswered since.
  Every private message updates it (one upsert), so the planning pass selects users silent for long
  enough by an index instead of reading every conversation.
- A *check-in* is planned once per occasion: its id is derived from (scope, rule, memory, occasion),
  so planning again, after a restart or in another process, finds it already there. It then moves
  `planned` -> `writing` (claimed by one job: only one process ever writes and sends it) ->
  `sending` -> `sent`, or ends `dropped` (stale, manners), `cancelled` (check-ins turned off) or
  `failed` (the platform refused: the reason is kept for the operator).

No text is kept here: the message itself is stored in the conversation once sent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from knowledge.records import Scope
from knowledge.sql.database import Database, iso, scope_conditions
from knowledge.sql.rows import Row

SCHEMA = """
CREATE TABLE IF NOT EXISTS checkin_contacts (
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,       -- the private conversation check-ins go to
    last_user_at TEXT NOT NULL,          -- the user's last message there
    unanswered INTEGER NOT NULL DEFAULT 0,  -- check-ins sent since
    off_reason TEXT NOT NULL DEFAULT '', -- why check-ins were turned off for them, if the platform did it
    PRIMARY KEY (persona_id, user_id)
);
CREATE INDEX IF NOT EXISTS checkin_contacts_by_last ON checkin_contacts (last_user_at);
CREATE TABLE IF NOT EXISTS checkins (
    id TEXT PRIMARY KEY,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    rule TEXT NOT NULL,
    memory_id TEXT,
    occasion TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    due_at TEXT NOT NULL,
    stale_at TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'planned'
        CHECK (state IN ('planned', 'writing', 'sending', 'sent', 'dropped', 'cancelled', 'failed')),
    job_id TEXT,                         -- the job that carries it out (NULL: none yet)
    planned_at TEXT NOT NULL,
    done_at TEXT,
    message_id TEXT,                     -- the stored message, once sent
    note TEXT NOT NULL DEFAULT ''        -- why it was dropped, cancelled or failed
);
CREATE INDEX IF NOT EXISTS checkins_due ON checkins (state, due_at);
CREATE INDEX IF NOT EXISTS checkins_by_scope ON checkins (persona_id, user_id, state);
"""
CheckinState = Literal["planned", "writing", "sending", "sent", "dropped", "cancelled", "failed"]
OPEN_STATES = ("planned", "writing")  # not yet on its way: turning check-ins off still stops it


@dataclass(frozen=True, slots=True)
class Contact:
    """A scope's private conversation, as check-ins see it."""

    scope: Scope
    conversation_id: str
    last_user_at: datetime
    unanswered: int = 0
    off_reason: str = ""


@dataclass(frozen=True, slots=True)
class Checkin:
    """One check-in, planned or done."""

    id: str
    scope: Scope
    rule: str
    memory_id: str | None
    occasion: datetime
    conversation_id: str
    due_at: datetime
    stale_at: datetime
    state: CheckinState = "planned"
    job_id: str | None = None
    planned_at: datetime | None = None
    done_at: datetime | None = None
    message_id: str | None = None
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready view, for the operator's listing."""
        return {
            "id": self.id,
            "persona_id": self.scope.persona_id,
            "user_id": self.scope.user_id,
            "rule": self.rule,
            "memory_id": self.memory_id,
            "occasion": self.occasion.isoformat(),
            "conversation_id": self.conversation_id,
            "due_at": self.due_at.isoformat(),
            "stale_at": self.stale_at.isoformat(),
            "state": self.state,
            "planned_at": None if self.planned_at is None else self.planned_at.isoformat(),
            "done_at": None if self.done_at is None else self.done_at.isoformat(),
            "message_id": self.message_id,
            "note": self.note,
        }


def checkin_id(scope: Scope, rule: str, memory_id: str | None, occasion: datetime) -> str:
    """The id one occasion always gets, `ci_<hex>`: planning it twice plans it once."""
    key = "\x1f".join((scope.persona_id, scope.user_id, rule, memory_id or "", iso(occasion)))
    return f"ci_{hashlib.sha256(key.encode()).hexdigest()[:16]}"


_COLUMNS = (
    "id, persona_id, user_id, rule, memory_id, occasion, conversation_id, due_at, stale_at, state, job_id,"
    " planned_at, done_at, message_id, note"
)


def _moment(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _checkin(row: Row) -> Checkin:
    return Checkin(
        id=row["id"],
        scope=Scope(row["persona_id"], row["user_id"]),
        rule=row["rule"],
        memory_id=row["memory_id"],
        occasion=datetime.fromisoformat(row["occasion"]),
        conversation_id=row["conversation_id"],
        due_at=datetime.fromisoformat(row["due_at"]),
        stale_at=datetime.fromisoformat(row["stale_at"]),
        state=row["state"],
        job_id=row["job_id"],
        planned_at=_moment(row["planned_at"]),
        done_at=_moment(row["done_at"]),
        message_id=row["message_id"],
        note=row["note"],
    )


def _contact(row: Row) -> Contact:
    return Contact(
        scope=Scope(row["persona_id"], row["user_id"]),
        conversation_id=row["conversation_id"],
        last_user_at=datetime.fromisoformat(row["last_user_at"]),
        unanswered=int(row["unanswered"]),
        off_reason=row["off_reason"],
    )


_CONTACT_COLUMNS = "persona_id, user_id, conversation_id, last_user_at, unanswered, off_reason"


class CheckinLog:
    """Contacts and check-ins, in two tables of the companion's database."""

    def __init__(self, db: Database) -> None:
        self._db = db
        db.create(SCHEMA)

    # -- contacts --------------------------------------------------------------------------------

    def user_wrote(self, scope: Scope, conversation_id: str, at: datetime) -> None:
        """The user wrote in private: check-ins go there, and none is unanswered any more."""
        with self._db.transaction() as db:
            db.execute(
                f"INSERT INTO checkin_contacts ({_CONTACT_COLUMNS}) VALUES (?, ?, ?, ?, 0, '')"
                " ON CONFLICT (persona_id, user_id) DO UPDATE SET conversation_id = excluded.conversation_id,"
                " last_user_at = excluded.last_user_at, unanswered = 0",
                (scope.persona_id, scope.user_id, conversation_id, iso(at)),
            )

    def contact(self, scope: Scope) -> Contact | None:
        """The scope's private conversation, if the user ever wrote in one."""
        found = self.contacts([scope])
        return found.get(scope)

    def contacts(self, scopes: Iterable[Scope]) -> dict[Scope, Contact]:
        """The contacts of these scopes (those that have one), looked up a batch at a time."""
        found: dict[Scope, Contact] = {}
        for condition, params in scope_conditions(scopes):
            for row in self._db.query(f"SELECT {_CONTACT_COLUMNS} FROM checkin_contacts WHERE {condition}", params):
                contact = _contact(row)
                found[contact.scope] = contact
        return found

    def silent_contacts(self, after: datetime, before: datetime) -> list[Contact]:
        """Contacts whose user last wrote between `after` and `before` (by index: no other row is read)."""
        rows = self._db.query(
            f"SELECT {_CONTACT_COLUMNS} FROM checkin_contacts WHERE last_user_at >= ? AND last_user_at <= ?",
            (iso(after), iso(before)),
        )
        return [_contact(row) for row in rows]

    def switched_off(self, scope: Scope, reason: str) -> None:
        """Keep why check-ins were turned off for the user without their asking (the platform refused)."""
        with self._db.transaction() as db:
            db.execute(
                "UPDATE checkin_contacts SET off_reason = ? WHERE persona_id = ? AND user_id = ?",
                (reason, scope.persona_id, scope.user_id),
            )

    # -- check-ins -------------------------------------------------------------------------------

    def plan(self, checkins: Iterable[Checkin]) -> int:
        """Plan check-ins; one already planned (or done) for the same occasion stays as it is. Returns how many
        are new."""
        rows = [
            (
                checkin.id,
                checkin.scope.persona_id,
                checkin.scope.user_id,
                checkin.rule,
                checkin.memory_id,
                iso(checkin.occasion),
                checkin.conversation_id,
                iso(checkin.due_at),
                iso(checkin.stale_at),
                iso(checkin.planned_at or checkin.due_at),
            )
            for checkin in checkins
        ]
        if not rows:
            return 0
        with self._db.transaction() as db:
            return db.executemany(
                "INSERT INTO checkins (id, persona_id, user_id, rule, memory_id, occasion, conversation_id, due_at,"
                " stale_at, planned_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                rows,
            ).rowcount

    def get(self, checkin_id: str) -> Checkin | None:
        """One check-in by id."""
        rows = self._db.query(f"SELECT {_COLUMNS} FROM checkins WHERE id = ?", (checkin_id,))
        return _checkin(rows[0]) if rows else None

    def due(self, now: datetime, *, limit: int = 1000) -> list[Checkin]:
        """Planned check-ins whose time has come and that no job carries yet, the longest waiting first."""
        rows = self._db.query(
            f"SELECT {_COLUMNS} FROM checkins WHERE state = 'planned' AND due_at <= ? AND job_id IS NULL"
            " ORDER BY due_at LIMIT ?",
            (iso(now), limit),
        )
        return [_checkin(row) for row in rows]

    def listing(self, *, since: datetime, due_by: datetime | None = None) -> list[Checkin]:
        """Check-ins for the operator: open ones, and those done since `since`; given `due_by`, only open
        ones due by then. Ordered by when they are (or were) due."""
        if due_by is not None:
            where, params = "state IN ('planned', 'writing', 'sending') AND due_at <= ?", [iso(due_by)]
        else:
            where, params = "state IN ('planned', 'writing', 'sending') OR done_at >= ?", [iso(since)]
        rows = self._db.query(f"SELECT {_COLUMNS} FROM checkins WHERE {where} ORDER BY due_at, id", params)
        return [_checkin(row) for row in rows]

    def carried_by(self, checkin_id: str, job_id: str) -> None:
        """A job now carries the check-in out; planning passes leave it to that job."""
        with self._db.transaction() as db:
            db.execute("UPDATE checkins SET job_id = ? WHERE id = ? AND state = 'planned'", (job_id, checkin_id))

    def claim(self, checkin_id: str, job_id: str) -> bool:
        """Take a planned check-in to write and send it: True for exactly one job."""
        with self._db.transaction() as db:
            return (
                db.execute(
                    "UPDATE checkins SET state = 'writing', job_id = ? WHERE id = ? AND state = 'planned'",
                    (job_id, checkin_id),
                ).rowcount
                == 1
            )

    def postpone(self, checkin_id: str, until: datetime) -> None:
        """Not now (the user's night, a conversation going on, today's one already sent): due again `until`."""
        with self._db.transaction() as db:
            db.execute(
                "UPDATE checkins SET state = 'planned', due_at = ?, job_id = NULL WHERE id = ? AND state IN"
                " ('planned', 'writing')",
                (iso(until), checkin_id),
            )

    def sending(self, checkin_id: str) -> bool:
        """The message is written and about to go: from here on it is never sent again."""
        return self._move(checkin_id, "writing", "sending")

    def sent(self, checkin: Checkin, at: datetime, message_id: str, note: str = "") -> bool:
        """It went out and is stored as `message_id`: one more check-in the user has not answered yet."""
        with self._db.transaction() as db:
            moved = db.execute(
                "UPDATE checkins SET state = 'sent', done_at = ?, message_id = ?, note = ?"
                " WHERE id = ? AND state = 'sending'",
                (iso(at), message_id, note, checkin.id),
            ).rowcount
            if moved:
                db.execute(
                    "UPDATE checkin_contacts SET unanswered = unanswered + 1 WHERE persona_id = ? AND user_id = ?",
                    (checkin.scope.persona_id, checkin.scope.user_id),
                )
        return bool(moved)

    def end(self, checkin_id: str, state: Literal["dropped", "failed"], reason: str, at: datetime) -> bool:
        """It will not be sent: dropped by the rules, or failed on its platform, for `reason`."""
        with self._db.transaction() as db:
            return (
                db.execute(
                    "UPDATE checkins SET state = ?, note = ?, done_at = ? WHERE id = ?"
                    " AND state IN ('planned', 'writing', 'sending')",
                    (state, reason, iso(at), checkin_id),
                ).rowcount
                == 1
            )

    def cancel(self, scope: Scope, reason: str, at: datetime) -> int:
        """Cancel every check-in of the scope not yet on its way (check-ins were turned off); returns how many."""
        with self._db.transaction() as db:
            return db.execute(
                "UPDATE checkins SET state = 'cancelled', note = ?, done_at = ? WHERE persona_id = ? AND user_id = ?"
                " AND state IN ('planned', 'writing')",
                (reason, iso(at), scope.persona_id, scope.user_id),
            ).rowcount

    def sent_since(self, scope: Scope, since: datetime) -> int:
        """How many check-ins went to the user since `since`."""
        [(count,)] = self._db.query(
            "SELECT COUNT(*) FROM checkins WHERE persona_id = ? AND user_id = ? AND state = 'sent' AND done_at >= ?",
            (scope.persona_id, scope.user_id, iso(since)),
        )
        return int(count)

    def awaiting_answer(self, since: datetime) -> set[tuple[str, str]]:
        """(persona, conversation) pairs where a check-in sent since `since` is not answered yet."""
        rows = self._db.query(
            "SELECT DISTINCT checkins.persona_id, checkins.conversation_id FROM checkins JOIN checkin_contacts"
            " ON checkin_contacts.persona_id = checkins.persona_id AND checkin_contacts.user_id = checkins.user_id"
            " WHERE checkins.state = 'sent' AND checkins.done_at >= ? AND checkin_contacts.unanswered > 0",
            (iso(since),),
        )
        return {(persona_id, conversation_id) for persona_id, conversation_id in rows}

    def forget(self, scope: Scope) -> int:
        """Delete the scope's contact and check-ins; returns how many rows went."""
        params = (scope.persona_id, scope.user_id)
        with self._db.transaction() as db:
            return sum(
                db.execute(f"DELETE FROM {table} WHERE persona_id = ? AND user_id = ?", params).rowcount
                for table in ("checkin_contacts", "checkins")
            )

    def _move(self, checkin_id: str, old: CheckinState, new: CheckinState) -> bool:
        with self._db.transaction() as db:
            return (
                db.execute("UPDATE checkins SET state = ? WHERE id = ? AND state = ?", (new, checkin_id, old)).rowcount
                == 1
            )
