"""Which memories each scope holds: their ids per (persona, user), in the SQL store beside the messages.

chromadb finds a scope's memories by scanning the metadata of the whole collection (about 60 ms at 50,000
memories, growing with every user), while reading the same records by id costs a few. So the store keeps
the ids of each scope here (the embedded SQLite file, or PostgreSQL in server mode, where every process
sees them) and reads a whole scope by id: one indexed SQL read and one chromadb read by id.

chromadb is the truth; this list is kept a superset of it. A memory is listed before it is written and
unlisted after it is deleted, so a crash between the two writes leaves an id listed that chromadb lacks (a
stray), never a memory that is not listed: nothing is hidden, and nothing comes back, since a read keeps only
what chromadb holds in that scope. A read that meets a stray drops it once it is older than
`STRAY_GRACE` (younger, it may be a write still on its way). The list is made from chromadb once for each
store (`start`, `ChromaKnowledgeBase.check_ids`, `finish`: at the first start with it, after the store was
replaced, or when it lists fewer memories than chromadb holds) and checked against it at every compaction.
A forget of a scope leaves none of its rows (`forget`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

from knowledge.records import Scope
from knowledge.sql.database import Database, iso, opened

# How long a listed id that chromadb lacks is taken for a write on its way: a memory is listed, then written
# (a few milliseconds, longer while an erasure holds the store); only older strays are dropped.
STRAY_GRACE = timedelta(hours=1)
BATCH = 500  # rows per statement

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_ids (
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    listed_at TEXT NOT NULL,   -- when it was listed (a stray younger than the grace may be a write on its way)
    PRIMARY KEY (persona_id, user_id, memory_id)
);
CREATE TABLE IF NOT EXISTS memory_ids_store (
    store_id TEXT PRIMARY KEY,       -- the memory store the ids are of (`chroma_erasure.store_identity`)
    complete INTEGER NOT NULL DEFAULT 0  -- 1 once every memory it held was listed
);
"""


class ScopeIds:
    """The ids of each scope's memories, for `ChromaKnowledgeBase` to read a whole scope by id."""

    def __init__(self, where: Database | Path) -> None:
        """`where`: the shared database, or the path of the embedded SQLite file."""
        self._db = opened(where, _SCHEMA)
        self._owned = isinstance(where, Path)  # a shared database is closed by whoever opened it

    def of(self, scope: Scope) -> list[str]:
        """The ids listed for `scope` (strays included: the reader keeps what the store holds)."""
        rows = self._db.query(
            "SELECT memory_id FROM memory_ids WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id)
        )
        return [str(row["memory_id"]) for row in rows]

    def add(self, pairs: Iterable[tuple[Scope, str]], at: datetime) -> None:
        """List these ids under their scopes (before the memories are written)."""
        rows = [(scope.persona_id, scope.user_id, memory_id, iso(at)) for scope, memory_id in pairs]
        for start in range(0, len(rows), BATCH):
            with self._db.transaction() as db:
                db.executemany(
                    "INSERT INTO memory_ids (persona_id, user_id, memory_id, listed_at) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (persona_id, user_id, memory_id) DO UPDATE SET listed_at = excluded.listed_at",
                    rows[start : start + BATCH],
                )

    def remove(self, pairs: Iterable[tuple[Scope, str]]) -> None:
        """Unlist these ids from their scopes (after the memories were deleted)."""
        self._delete("", [(scope.persona_id, scope.user_id, memory_id) for scope, memory_id in pairs])

    def remove_strays(self, pairs: Iterable[tuple[Scope, str]], *, listed_before: datetime) -> None:
        """Unlist these ids that the store lacks, those listed before `listed_before` (a younger one may be
        a write on its way)."""
        rows = [(scope.persona_id, scope.user_id, memory_id, iso(listed_before)) for scope, memory_id in pairs]
        self._delete(" AND listed_at < ?", rows)

    def forget(self, scope: Scope) -> None:
        """Unlist every id of `scope` (after its memories were deleted): nothing of it stays here."""
        with self._db.transaction() as db:
            db.execute("DELETE FROM memory_ids WHERE persona_id = ? AND user_id = ?", (scope.persona_id, scope.user_id))

    def listed(self) -> dict[tuple[Scope, str], str]:
        """Every listed (scope, id) with when it was listed, as stored (ISO 8601, for comparing with `iso`)."""
        scopes: dict[tuple[str, str], Scope] = {}  # one Scope per scope, not per row: this holds every id
        listed = {}
        for row in self._db.query("SELECT persona_id, user_id, memory_id, listed_at FROM memory_ids"):
            key = (str(row["persona_id"]), str(row["user_id"]))
            scope = scopes.get(key) or scopes.setdefault(key, Scope(*key))
            listed[scope, str(row["memory_id"])] = str(row["listed_at"])
        return listed

    def total(self) -> int:
        """How many ids are listed, over every scope."""
        [row] = self._db.query("SELECT COUNT(*) AS n FROM memory_ids")
        return int(row["n"])

    def complete_for(self, store_id: str) -> bool:
        """Whether every memory of the store `store_id` was listed (between `start` and `finish`)."""
        rows = self._db.query("SELECT complete FROM memory_ids_store WHERE store_id = ?", (store_id,))
        return bool(rows and rows[0]["complete"])

    def start(self, store_id: str) -> None:
        """Begin listing the store `store_id`: the ids of any other store it replaced go first."""
        with self._db.transaction() as db:
            known = db.execute("SELECT store_id FROM memory_ids_store").fetchall()
            if any(str(row[0]) != store_id for row in known):
                db.execute("DELETE FROM memory_ids")
                db.execute("DELETE FROM memory_ids_store")
            db.execute(
                "INSERT INTO memory_ids_store (store_id, complete) VALUES (?, 0) ON CONFLICT (store_id) DO NOTHING",
                (store_id,),
            )

    def finish(self, store_id: str) -> None:
        """Record that every memory the store `store_id` held is listed."""
        with self._db.transaction() as db:
            db.execute("UPDATE memory_ids_store SET complete = 1 WHERE store_id = ?", (store_id,))

    def close(self) -> None:
        if self._owned:
            self._db.close()

    def _delete(self, condition: str, rows: Sequence[tuple[str, ...]]) -> None:
        for start in range(0, len(rows), BATCH):
            with self._db.transaction() as db:
                db.executemany(
                    f"DELETE FROM memory_ids WHERE persona_id = ? AND user_id = ? AND memory_id = ?{condition}",
                    rows[start : start + BATCH],
                )


def scope_pairs(scope: Scope, ids: Sequence[str]) -> list[tuple[Scope, str]]:
    """`(scope, id)` for each of `ids`."""
    return [(scope, memory_id) for memory_id in ids]
