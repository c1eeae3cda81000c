"""Searchable conversation history: every message of a scope's past conversations.

The rule: docs/development/design-rules.md#conversation-history.

The message log keeps every message in SQLite (the window, then archived and summarized rows). This
module embeds each one, keeps the vectors beside the messages, and searches a scope's messages with
the same hybrid engine as memories (`knowledge/search/index.py`). A message belongs to the scope its row names:
the user who wrote it, or for a reply the user it answered. So in a group chat no one's words can be
found from another user's scope, not even as the context of a neighbouring message.

What a message is found by: its embedding of "<speaker>: <text>", and words from its date, speaker
and text plus its neighbours in the same conversation and scope (the message before at half weight,
the one after at a quarter). An answer is often found by the question before it ("what did you
research?" / "adoption agencies"); on LoCoMo the context and the date each measured a gain
(docs/performance/locomo.md). The two legs' scores then go to `thread_index.py`, which ranks with
the message's place in its conversation too. A time the message names keeps the search to what was
said then, as long as anything was (docs/concepts/time.md#recall-by-time).

Indexing runs in the background (`index_pending`): each message is marked once its entry is stored,
so a crash only delays it, and with several processes one indexes at a time (a cluster-wide lock)
while a message committed late by another is still found. Forgetting messages (for
`core/forgetting.py`) goes through here, under one lock with the indexing, and a vector is only
stored while its message exists, so a message being indexed while it is forgotten leaves no vector
behind.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from knowledge.conversations.message_log import MessageLog
from knowledge.conversations.thread_index import ThreadIndex
from knowledge.dates.windows import TimeWindow
from knowledge.records import Scope, StoredMessage
from knowledge.rules.discretion import PRIVATE, Audience
from knowledge.search.embedding import Embedder
from knowledge.search.index import Query, QueryEncoder, SearchIndex, best_first
from knowledge.search.lexical import Terms, combined, terms_of, tokenize
from knowledge.search.scope_cache import ScopeCache
from knowledge.sql.cluster import ClusterLocks, SingleProcess
from knowledge.sql.database import Database, opened
from knowledge.sql.scope_versions import ScopeVersions

PREVIOUS_WEIGHT = 0.5
NEXT_WEIGHT = 0.25
INDEX_BATCH = 64  # messages embedded per call
# The meaning leg embeds a message's first characters only (its cost grows with every token); the word
# leg indexes all of it. On LoCoMo, 320 instead of 2,000 left every category within 0.001 recall@10
# (overall .759 -> .760): what a long message is about shows early, and its details are words.
MAX_EMBEDDED_CHARS = 320
INDEXING_LOCK = "history:indexing"  # one process indexes at a time
MARKED = -1  # `history_index.last_seq` once every message carries its own `indexed` mark

_SCHEMA = """
CREATE TABLE IF NOT EXISTS message_vectors (
    message_id TEXT PRIMARY KEY,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS message_vectors_by_scope ON message_vectors (persona_id, user_id);
CREATE TABLE IF NOT EXISTS history_index (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    embedder TEXT NOT NULL,
    last_seq INTEGER NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class HistoryHit:
    """A past message found by a search, with when and by whom it was said (on `message`)."""

    message: StoredMessage
    relevance: float  # fused score, 0..1 relative to the other hits
    similarity: float  # cosine similarity of the embeddings
    lexical: float  # BM25 score of its words with its neighbours' (0: no word in common)


def spoken(message: StoredMessage) -> str:
    """How a message reads out of context: "<speaker>: <text>"."""
    return f"{message.speaker_name}: {message.content}"


def date_words(moment: datetime) -> str:
    """A message's date as words a question may use: "Monday 8 May 2023"."""
    return f"{moment:%A} {moment.day} {moment:%B %Y}"


class _ScopeHistory:
    """One scope's indexed messages: a `SearchIndex` of each message with its neighbours' words, and a
    `ThreadIndex` of where each stands in its conversation, row for row."""

    def __init__(self, dim: int, messages: Sequence[StoredMessage], vectors: Mapping[str, np.ndarray]) -> None:
        """`messages` (oldest first) with their `vectors` are indexed at once, each document built once."""
        self._lock = threading.Lock()
        self._index = SearchIndex(dim)
        self._threads = ThreadIndex()
        self._messages: dict[str, StoredMessage] = {}
        self._words: dict[str, Terms] = {}  # each message's own words, reused as its neighbours' context
        self._dates: dict[str, Terms] = {}  # each message's date words: part of its own document only
        self._conversations: dict[str, list[str]] = {}  # conversation id -> message ids, oldest first
        self._saying: dict[bytes, list[str]] = {}  # digest of what a message says -> the messages saying it
        for message in messages:
            self._remember(message)
        for thread in self._conversations.values():
            for position, message_id in enumerate(thread):
                self._put(thread, position, vectors[message_id])

    @property
    def size(self) -> int:
        return len(self._messages)

    def add(self, message: StoredMessage, vector: np.ndarray) -> None:
        """Index a message newer than every message held; its predecessor gains it as context. A message held
        already is left as it is (indexed again after a commit whose answer an outage cut off)."""
        with self._lock:
            if message.id in self._messages:
                return
            thread = self._remember(message)
            self._put(thread, len(thread) - 1, vector)
            if len(thread) > 1:
                self._index.put(thread[-2], terms=self._document(thread, len(thread) - 2))

    def search(
        self,
        query: Query,
        limit: int,
        exclude: Collection[str],
        audience: Audience,
        during: TimeWindow | None = None,
        window: TimeWindow | None = None,
        repeats: bool = True,
    ) -> list[HistoryHit]:
        """The most relevant messages not in `exclude` that `audience` may hear quoted, best first. Given
        `during`, only those said in it; given `window`, only those said in it as long as it holds any
        (excluded ones too: a window whose messages a memory covers still holds them), else any. Without
        `repeats`, no message saying just what the query says (a question asked again)."""
        with self._lock:
            if self._index.size == 0:
                return []
            kept = self._threads.visible(audience)
            if during is not None:
                kept &= self._threads.said_during(during)
            if window is not None and (inside := kept & self._threads.said_during(window)).any():
                kept = inside
            kept[self._index.rows(exclude)] = False
            if not repeats:
                kept[self._index.rows(self._saying.get(_digest(query.text), ()))] = False
            if not kept.any():
                return []
            similarity, lexical = self._index.legs(query)
            relevance = self._threads.relevance(query.text, similarity, lexical, kept)
            keys = self._index.keys
            return [
                HistoryHit(
                    self._messages[keys[row]], float(relevance[row]), float(similarity[row]), float(lexical[row])
                )
                for row in best_first(relevance, min(limit, int(kept.sum())))
            ]

    def without_participants(self, text: str) -> str | None:
        """`text` without the participants' names it mentions, for its meaning; None if it mentions none."""
        with self._lock:
            return self._threads.without_participants(text)

    def _put(self, thread: list[str], position: int, vector: np.ndarray) -> None:
        message_id = thread[position]
        self._index.put(message_id, vector=vector, terms=self._document(thread, position))
        [previous] = self._index.rows([thread[position - 1]]) if position > 0 else [None]
        words = sum(self._words[message_id].values())
        self._threads.append(self._messages[message_id], previous, self._index.vectors, words)

    def _remember(self, message: StoredMessage) -> list[str]:
        """Hold a message and its words; returns its conversation's thread, which it now ends."""
        thread = self._conversations.setdefault(message.conversation_id, [])
        thread.append(message.id)
        self._messages[message.id] = message
        self._saying.setdefault(_digest(message.content), []).append(message.id)
        self._words[message.id] = terms_of(spoken(message))
        self._dates[message.id] = terms_of(date_words(message.sent_at))
        return thread

    def _document(self, thread: list[str], position: int) -> dict[str, float]:
        message_id = thread[position]
        parts = [(self._dates[message_id], 1.0), (self._words[message_id], 1.0)]
        if position > 0:
            parts.append((self._words[thread[position - 1]], PREVIOUS_WEIGHT))
        if position + 1 < len(thread):
            parts.append((self._words[thread[position + 1]], NEXT_WEIGHT))
        return combined(*parts)


class ConversationHistory:
    """Indexes every stored message in the background and searches a scope's past messages."""

    def __init__(
        self,
        log: MessageLog,
        embedder: Embedder,
        where: Database | Path,
        *,
        queries: QueryEncoder | None = None,
        locks: ClusterLocks | None = None,
        versions: ScopeVersions | None = None,
    ) -> None:
        """`where`: the message log's database (or its SQLite file), where the vectors are kept beside the
        messages. `locks` and `versions`: where other processes share the database (server mode)."""
        self._log = log
        self._embedder = embedder
        self.queries = queries or QueryEncoder(embedder)  # shared with the memory store, and emptied by a forget
        self._db = opened(where, _SCHEMA)
        self._locks = locks or SingleProcess()
        self._cache: ScopeCache[_ScopeHistory] = ScopeCache(self._load_scope, versions=versions)
        self._indexing = threading.Lock()  # one catch-up at a time
        self._wanted = threading.Event()  # a catch-up was asked for since the running one began
        self._writing = threading.Lock()  # indexing's writes and forgetting never interleave
        self._start_index()

    def index_pending(self) -> int:
        """Embed and index every message stored before this call; returns how many this call indexed.

        While another thread is catching up, this one does not wait for it (each background job asks, and dozens
        once held a thread each, waiting): it asks for one more round, which whoever holds the catch-up runs before
        it lets go, so every message stored before a call is indexed by a round that began after it."""
        self._wanted.set()
        indexed = 0
        while self._wanted.is_set() and self._indexing.acquire(blocking=False):
            try:
                self._wanted.clear()
                with self._locks.hold(INDEXING_LOCK):
                    while batch := self._log.unindexed(INDEX_BATCH):
                        passages = [spoken(message)[:MAX_EMBEDDED_CHARS] for message in batch]
                        self._store(batch, self._embedder.embed_passages(passages))
                        indexed += len(batch)
            finally:
                self._indexing.release()
        return indexed

    def search(
        self,
        scope: Scope,
        query: str,
        *,
        limit: int = 5,
        exclude: Collection[str] = (),
        audience: Audience = PRIVATE,
        during: TimeWindow | None = None,
    ) -> list[HistoryHit]:
        """The scope's past messages most relevant to `query`, best first, leaving out the ids in `exclude`;
        only those `audience` may hear quoted (in a group: those said there, unless the user shares all)
        and, given `during`, only those said in that window, even with no word in common."""
        if not query.strip() or limit <= 0:
            return []
        snapshot = self._cache.get(scope)
        return snapshot.search(self._prepared(snapshot, query), limit, set(exclude), audience, during=during)

    def recall(
        self,
        scope: Scope,
        query: str,
        *,
        window: TimeWindow | None,
        limit: int = 5,
        exclude: Collection[str] = (),
        audience: Audience = PRIVATE,
    ) -> list[HistoryHit]:
        """What a message naming `window` ("yesterday", "in March") recalls: the most relevant past messages
        said in that window, and only when it holds none, from any time (a time named restricts retrieval:
        docs/concepts/time.md#recall-by-time). "Last time" keeps to no window: every past is before. A past
        message saying just what this one says (the same question asked before) brings nothing new: what
        answered it may."""
        if not query.strip() or limit <= 0:
            return []
        strict = None if window is None or window.last_time else window
        snapshot = self._cache.get(scope)
        return snapshot.search(
            self._prepared(snapshot, query), limit, set(exclude), audience, window=strict, repeats=False
        )

    def _prepared(self, snapshot: _ScopeHistory, text: str) -> Query:
        """`text` as a query of the scope's messages: its words, and the meaning of its words other than the
        names of the participants it mentions (`thread_index.py`). In a turn the memories' search has
        embedded `text` already, so only a message mentioning a participant costs one more embedding."""
        rest = snapshot.without_participants(text)
        if rest is None:
            return self.queries.encode(text)
        return Query(text, self.queries.encode(rest).vector, tuple(tokenize(text)))

    def messages(self, scope: Scope) -> list[StoredMessage]:
        """Every stored message of the scope, oldest first."""
        return self._log.messages_of(scope)

    def forget(self, scope: Scope) -> int:
        """Delete every message of the scope, and its index; returns how many messages went."""
        with self._writing:
            deleted = self._log.forget(scope)
            with self._db.transaction() as db:
                db.execute("DELETE FROM message_vectors WHERE persona_id = ? AND user_id = ?", _scope_key(scope))
            self._cache.drop([scope])
        return deleted

    def forget_messages(self, scope: Scope, ids: Iterable[str]) -> int:
        """Delete some of the scope's messages and their index entries (their neighbours lose them as context)."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return 0
        with self._writing:
            deleted = self._log.forget_messages(scope, wanted)
            marks = ",".join("?" * len(wanted))
            with self._db.transaction() as db:
                db.execute(
                    f"DELETE FROM message_vectors WHERE persona_id = ? AND user_id = ? AND message_id IN ({marks})",
                    (*_scope_key(scope), *wanted),
                )
            self._cache.drop([scope])  # reloaded on next use, with every neighbour's context rebuilt
        return deleted

    def edit(self, source_id: str, content: str) -> StoredMessage | None:
        """A message edited on its platform: the new words are kept and indexed again; None if unknown."""
        with self._writing:
            return self._reindexed(self._log.edit(source_id, content))

    def rewrite(self, message_id: str, content: str) -> StoredMessage | None:
        """A stored message's words completed later (a photo's description): kept and indexed; None if unknown."""
        with self._writing:
            return self._reindexed(self._log.rewrite(message_id, content))

    def _reindexed(self, edited: StoredMessage | None) -> StoredMessage | None:
        if edited is not None:
            [vector] = self._embedder.embed_passages([spoken(edited)[:MAX_EMBEDDED_CHARS]])
            with self._db.transaction() as db:
                db.execute(_PUT_VECTOR, _vector_row(edited, vector))
            self._cache.drop([Scope(edited.persona_id, edited.user_id)])  # its neighbours' context changed too
        return edited

    def by_source(self, source_id: str) -> StoredMessage | None:
        """The message a person sent with this platform message id, if it is stored."""
        return self._log.by_source(source_id)

    def messages_by_id(self, scope: Scope, ids: Iterable[str]) -> list[StoredMessage]:
        """The scope's messages with these ids (ids of other scopes are simply absent)."""
        return self._log.messages_by_id(scope, ids)

    def replies_in(self, persona_id: str, conversation_ids: Collection[str]) -> list[StoredMessage]:
        """The persona's replies in these conversations (groups), whichever user each answered."""
        return self._log.replies_in(persona_id, conversation_ids)

    def reload(self, scopes: Iterable[Scope]) -> None:
        """Their messages changed hands (`knowledge/people/joining.py`): load these scopes again on next use."""
        with self._writing:
            self._cache.drop(scopes)

    def checkpoint(self) -> bool:
        """Truncate the database's write-ahead log (after forgetting, the pages that held the text go too)."""
        return self._db.checkpoint()

    def indexed_count(self, scope: Scope) -> int:
        """How many of the scope's messages have an index entry."""
        [(count,)] = self._db.query(
            "SELECT COUNT(*) FROM message_vectors WHERE persona_id = ? AND user_id = ?", _scope_key(scope)
        )
        return int(count)

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def _store(self, messages: Sequence[StoredMessage], vectors: np.ndarray) -> None:
        with self._writing:
            # A message forgotten while it was being embedded must not come back as a vector: only a message
            # still stored gets one (in this process the lock keeps forgets out; another process's forget
            # either deletes first, or waits for this transaction and then takes the vector with the message).
            alive = self._log.existing(message.id for message in messages)
            kept = [(message, vector) for message, vector in zip(messages, vectors) if message.id in alive]
            with self._db.transaction() as db:
                db.executemany(_PUT_VECTOR, [_vector_row(message, vector) for message, vector in kept])
                marks = ",".join("?" * len(messages))
                db.execute(f"UPDATE messages SET indexed = 1 WHERE id IN ({marks})", [m.id for m in messages])
            held = self._cache.writing_all(Scope(message.persona_id, message.user_id) for message, _ in kept)
            for message, vector in kept:
                if snapshot := held.get(Scope(message.persona_id, message.user_id)):
                    snapshot.add(message, vector)

    def _load_scope(self, scope: Scope) -> _ScopeHistory:
        rows = self._db.query(
            "SELECT message_id, vector FROM message_vectors WHERE persona_id = ? AND user_id = ?", _scope_key(scope)
        )
        vectors = {message_id: np.frombuffer(blob, dtype=np.float32) for message_id, blob in rows}
        indexed = [message for message in self._log.messages_of(scope) if message.id in vectors]
        return _ScopeHistory(self._embedder.dim, indexed, vectors)

    def _start_index(self) -> None:
        """Start from the beginning when there is no index yet, or when it was built by another embedder.

        An index made before each message carried its `indexed` mark went as far as `last_seq`: the
        messages up to there are marked once, and `last_seq` is then -1 (messages carry their marks)."""
        with self._db.transaction() as db:
            db.execute(
                "INSERT INTO history_index (id, embedder, last_seq) VALUES (0, ?, ?) ON CONFLICT (id) DO NOTHING",
                (self._embedder.name, MARKED),
            )
            [(embedder, last_seq)] = db.execute("SELECT embedder, last_seq FROM history_index").fetchall()
            if embedder != self._embedder.name:
                db.execute("DELETE FROM message_vectors")
                db.execute("UPDATE messages SET indexed = 0 WHERE indexed = 1")
                db.execute("UPDATE history_index SET embedder = ?, last_seq = ?", (self._embedder.name, MARKED))
            elif last_seq != MARKED:
                db.execute("UPDATE messages SET indexed = 1 WHERE seq <= ?", (last_seq,))
                db.execute("UPDATE history_index SET last_seq = ?", (MARKED,))


def _digest(text: str) -> bytes:
    """What a text says, as a digest (no text kept): the same whatever its case and spacing."""
    said = " ".join(text.casefold().split())
    return hashlib.blake2b(said.encode(errors="surrogatepass"), digest_size=16).digest()


def _scope_key(scope: Scope) -> tuple[str, str]:
    return scope.persona_id, scope.user_id


# A message's vector is written only while the message is stored (see `_store`).
_PUT_VECTOR = (
    "INSERT INTO message_vectors (message_id, persona_id, user_id, vector)"
    " SELECT ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM messages WHERE id = ?)"
    " ON CONFLICT (message_id) DO UPDATE SET vector = excluded.vector"
)


def _vector_row(message: StoredMessage, vector: np.ndarray) -> tuple[object, ...]:
    blob = np.asarray(vector, np.float32).tobytes()
    return message.id, message.persona_id, message.user_id, blob, message.id
