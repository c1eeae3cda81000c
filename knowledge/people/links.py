"""Which platform identities are one person, and the one-time codes that link them.

A memory's scope is (persona, user), and its user is the person an identity belongs to: an identity never
linked is its own person (its user id is the identity itself, as before links existed), a linked one
belongs to a person id (`person:<hex>`) that every identity of the person shares. `person_of` is that rule.

A code proves that whoever sends it from one identity holds the other: `/link` on one side issues it,
`/link <code>` on the other redeems it. It is drawn from `secrets` (6 symbols of 32: 30 bits), valid
`CODE_LIFETIME`, taken by its first use, and stored only as a digest. Each identity may send
`MAX_WRONG_TRIES` wrong codes an hour; then every code it sends is refused until the hour has passed.

Joining runs in one transaction that first takes the link lock row, so two links racing for the same
identities run one after the other on either backend: the second finds the first's result. Every
identity has at most one row (its primary key), so no identity ever belongs to two persons.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from pathlib import Path

from knowledge.sql.database import Database, Transaction, iso, opened

PERSON_PREFIX = "person:"
CODE_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"  # 32 symbols, none that reads as another (no 0/O, 1/I)
CODE_LENGTH = 6  # 32**6 = 2**30 codes
CODE_LIFETIME = timedelta(minutes=10)
MAX_WRONG_TRIES = 5  # per identity and TRY_WINDOW
TRY_WINDOW = timedelta(hours=1)

SCHEMA = """
CREATE TABLE IF NOT EXISTS person_links (
    identity TEXT PRIMARY KEY,
    person_id TEXT NOT NULL,
    linked_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS person_links_by_person ON person_links (person_id);
CREATE TABLE IF NOT EXISTS link_codes (
    identity TEXT PRIMARY KEY,
    code_digest TEXT NOT NULL UNIQUE,
    expires_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS link_tries (
    identity TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS link_tries_by_identity ON link_tries (identity, at);
CREATE TABLE IF NOT EXISTS link_lock (
    id INTEGER PRIMARY KEY,
    turns INTEGER NOT NULL
);
INSERT INTO link_lock (id, turns) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
"""


class Refusal(Enum):
    """Why a code linked nothing (what the sender is told says no more than this)."""

    UNKNOWN = "unknown"  # wrong, expired or used: the three look alike to the sender
    TOO_MANY_TRIES = "too many tries"
    OWN_CODE = "own code"  # sent from the identity that asked for it


@dataclass(frozen=True, slots=True)
class Joining:
    """Two identities made one person: the person's id, and the users (identities or persons) whose memory
    moves into it. `already` when they were one person before."""

    person_id: str
    movers: tuple[str, ...]
    already: bool = False


def digest(code: str) -> str:
    """How a code is stored: its SHA-256, of the code as typed in any case and spacing."""
    return hashlib.sha256("".join(code.split()).upper().encode()).hexdigest()


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def is_person(user_id: str) -> bool:
    """Whether a scope's user id names a linked person (not one identity)."""
    return user_id.startswith(PERSON_PREFIX)


class Links:
    """The identities of every person, in the database every process shares."""

    def __init__(self, where: Database | Path) -> None:
        self._db = opened(where, SCHEMA)

    # -- reading -------------------------------------------------------------------------------

    def person_of(self, identity: str) -> str:
        """The user id of the memory `identity` speaks to: its person's, or its own when never linked."""
        rows = self._db.query("SELECT person_id FROM person_links WHERE identity = ?", (identity,))
        return str(rows[0]["person_id"]) if rows else identity

    def members(self, user_id: str) -> list[str]:
        """The identities of a scope's user (a person's, in the order they joined; an identity alone: itself)."""
        if not is_person(user_id):
            return [user_id]
        rows = self._db.query(
            "SELECT identity FROM person_links WHERE person_id = ? ORDER BY linked_at, identity", (user_id,)
        )
        return [str(row["identity"]) for row in rows]

    def people(self) -> dict[str, list[str]]:
        """Every linked person with their identities (for operators)."""
        found: dict[str, list[str]] = {}
        for row in self._db.query("SELECT identity, person_id FROM person_links ORDER BY linked_at, identity"):
            found.setdefault(str(row["person_id"]), []).append(str(row["identity"]))
        return found

    # -- codes ---------------------------------------------------------------------------------

    def issue(self, identity: str, now: datetime) -> str:
        """A fresh code for `identity` (`/link`); an older code it asked for no longer works."""
        while True:
            code = new_code()
            with self._db.transaction() as db:
                taken = db.execute("SELECT 1 FROM link_codes WHERE code_digest = ?", (digest(code),)).fetchone()
                if taken is not None:
                    continue  # one chance in a billion: draw again
                db.execute("DELETE FROM link_codes WHERE identity = ? OR expires_at < ?", (identity, iso(now)))
                db.execute(
                    "INSERT INTO link_codes (identity, code_digest, expires_at) VALUES (?, ?, ?)",
                    (identity, digest(code), iso(now + CODE_LIFETIME)),
                )
            return code

    def redeem(self, identity: str, code: str, now: datetime) -> Joining | Refusal:
        """`/link <code>` sent from `identity`: the code's identity and this one become one person."""
        with self._db.transaction() as db:
            self._serialize(db)
            db.execute("DELETE FROM link_tries WHERE at < ?", (iso(now - TRY_WINDOW),))
            tries = db.execute("SELECT COUNT(*) AS n FROM link_tries WHERE identity = ?", (identity,)).fetchone()
            if tries is not None and int(tries["n"]) >= MAX_WRONG_TRIES:
                return Refusal.TOO_MANY_TRIES
            row = db.execute(
                "SELECT identity FROM link_codes WHERE code_digest = ? AND expires_at >= ?", (digest(code), iso(now))
            ).fetchone()
            if row is None:
                db.execute("INSERT INTO link_tries (identity, at) VALUES (?, ?)", (identity, iso(now)))
                return Refusal.UNKNOWN
            if row["identity"] == identity:
                return Refusal.OWN_CODE
            db.execute("DELETE FROM link_codes WHERE code_digest = ?", (digest(code),))  # used once
            return _join(db, str(row["identity"]), identity, now)

    # -- joining and leaving -------------------------------------------------------------------

    def join(self, first: str, second: str, now: datetime) -> Joining:
        """Make two identities one person, without a code (the operator's `companion users link`)."""
        with self._db.transaction() as db:
            self._serialize(db)
            return _join(db, first, second, now)

    def detach(self, identity: str) -> str | None:
        """`/unlink`: `identity` leaves its person and starts fresh; returns the person it left (None: it was
        not linked). A person left with one identity keeps it linked: the memory stays theirs."""
        with self._db.transaction() as db:
            self._serialize(db)
            row = db.execute("SELECT person_id FROM person_links WHERE identity = ?", (identity,)).fetchone()
            if row is None:
                return None
            others = db.execute(
                "SELECT COUNT(*) AS n FROM person_links WHERE person_id = ? AND identity <> ?",
                (row["person_id"], identity),
            ).fetchone()
            if others is None or int(others["n"]) == 0:
                return None  # the last identity of a person is the person
            db.execute("DELETE FROM person_links WHERE identity = ?", (identity,))
            return str(row["person_id"])

    def forget(self, identities: list[str]) -> int:
        """Drop the links, codes and tries of these identities (the person forgot everything); returns how many
        links went."""
        removed = 0
        with self._db.transaction() as db:
            for identity in identities:
                removed += db.execute("DELETE FROM person_links WHERE identity = ?", (identity,)).rowcount
                db.execute("DELETE FROM link_codes WHERE identity = ?", (identity,))
                db.execute("DELETE FROM link_tries WHERE identity = ?", (identity,))
        return removed

    def close(self) -> None:
        self._db.close()

    @staticmethod
    def _serialize(db: Transaction) -> None:
        """Take the link lock row: joins and detaches run one at a time, in every process."""
        db.execute("UPDATE link_lock SET turns = turns + 1 WHERE id = 1")


def _join(db: Transaction, first: str, second: str, now: datetime) -> Joining:
    """Inside the link transaction: `second` joins `first`'s person (or `first` joins `second`'s, or both a new
    one); a person already there absorbs the other's identities."""
    persons = {}
    for identity in (first, second):
        row = db.execute("SELECT person_id FROM person_links WHERE identity = ?", (identity,)).fetchone()
        persons[identity] = None if row is None else str(row["person_id"])
    if persons[first] is not None and persons[first] == persons[second]:
        # one person already: what either identity still holds of its own (a join cut short) moves again
        return Joining(str(persons[first]), (first, second), already=True)
    kept = persons[first] or persons[second] or f"{PERSON_PREFIX}{uuid.uuid4().hex[:16]}"
    movers: list[str] = []
    for identity in (first, second):
        person = persons[identity]
        if person is None:
            db.execute(
                "INSERT INTO person_links (identity, person_id, linked_at) VALUES (?, ?, ?)", (identity, kept, iso(now))
            )
            movers.append(identity)
        elif person != kept:
            db.execute("UPDATE person_links SET person_id = ? WHERE person_id = ?", (kept, person))
            movers.append(person)
    return Joining(kept, tuple(movers))
