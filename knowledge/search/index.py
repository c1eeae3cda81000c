"""SearchIndex, the hybrid search engine: one scope's items searched by meaning and by words, the scores fused.

Dense similarity (our offline embedder) finds paraphrases; BM25 (`lexical.py`) finds the names,
numbers and rare words an embedding blurs. Each leg is min-max normalised over the items searched,
then the two are averaged with equal weights. Fusing scores rather than ranks keeps how much better
the best hit is than the next: plain reciprocal-rank fusion measured worse than BM25 alone on some
LoCoMo conversations, the equal-weight score fusion better than either leg on every one
(docs/performance/locomo.md).

Memories (`scope_cache.py`, `store.py`) and conversation history (`history.py`) both search through
`SearchIndex`, with queries prepared once by a shared `QueryEncoder`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from knowledge.search.embedding import Embedder
from knowledge.search.lexical import LexicalIndex, Terms, tokenize

# A scope's similarity is one matrix-vector product, bound by memory, not arithmetic: OpenBLAS's
# extra threads only add hand-offs, which stall whenever another core is busy (10,000 x 384 under
# load: 8.0 ms p50 with two threads, 0.8 ms with one). So BLAS runs single-threaded in this process.
threadpool_limits(limits=1, user_api="blas")


@dataclass(frozen=True, slots=True)
class FusionWeights:
    """How much each leg counts in the fused relevance; they add up to 1."""

    dense: float = 0.5
    lexical: float = 0.5


@dataclass(frozen=True, slots=True)
class Query:
    """A query prepared once for any number of searches: its embedding and its lexical terms."""

    text: str
    vector: np.ndarray
    terms: tuple[str, ...]


class QueryEncoder:
    """Prepares texts for search, remembering the most recent ones, so each is embedded once: a turn
    searches memories and history with one message, the background roles often search the same text
    again, and a memory checked for duplicates is stored with the vector it was checked with.

    A text is remembered for `max_age` seconds at most (long enough for a turn's background work), and
    `forget` drops them all at once: what a user forgets must not linger in a process's memory."""

    def __init__(
        self,
        embedder: Embedder,
        *,
        cache_size: int = 256,
        max_age: float = 300.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.embedder = embedder
        self._cache_size = cache_size
        self._max_age = max_age
        self._monotonic = monotonic
        self._cache: OrderedDict[tuple[str, bool], tuple[float, Query]] = OrderedDict()  # oldest first
        self._lock = threading.Lock()

    def encode(self, text: str, *, as_passage: bool = False) -> Query:
        """The prepared query for `text`; `as_passage`: embedded as a passage (a memory's own text)."""
        key = (text, as_passage)
        with self._lock:
            self._drop_expired()
            remembered = self._cache.get(key)
            if remembered is not None:
                return remembered[1]
        embed = self.embedder.embed_passages if as_passage else self.embedder.embed_queries
        query = Query(text, embed([text])[0], tuple(tokenize(text)))
        with self._lock:
            self._cache.pop(key, None)  # embedded twice at once: kept in the order it was last embedded
            self._cache[key] = (self._monotonic(), query)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return query

    def passage_vector(self, text: str) -> np.ndarray:
        """The passage embedding of `text`, computed once for a duplicate check and for storing it."""
        return self.encode(text, as_passage=True).vector

    def texts(self) -> list[str]:
        """The texts remembered now, oldest first."""
        with self._lock:
            self._drop_expired()
            return [text for text, _ in self._cache]

    def forget(self) -> None:
        """Drop every remembered text (after a forget: it may have been one of them)."""
        with self._lock:
            self._cache.clear()

    def _drop_expired(self) -> None:
        oldest = self._monotonic() - self._max_age
        while self._cache and next(iter(self._cache.values()))[0] < oldest:
            self._cache.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Match:
    """One item found: its key, fused relevance (0..1, what results are ordered by) and each leg's raw score."""

    key: str
    relevance: float
    similarity: float  # cosine similarity of the embeddings
    lexical: float  # BM25 score (0: no word in common)


def normalized(scores: np.ndarray) -> np.ndarray:
    """Scores rescaled to 0..1 over the items searched; equal scores all count fully (or not at all if 0)."""
    low, high = float(scores.min()), float(scores.max())
    if high > low:
        return (scores - low) / (high - low)
    return np.full_like(scores, 1.0 if high > 0 else 0.0)


def fuse(similarity: np.ndarray, lexical: np.ndarray, weights: FusionWeights = FusionWeights()) -> np.ndarray:
    """The fused relevance of each item from its dense similarity and its BM25 score."""
    return weights.dense * normalized(similarity) + weights.lexical * normalized(lexical)


def best_first(scores: np.ndarray, limit: int) -> np.ndarray:
    """The positions of the `limit` highest scores, highest first (ties keep their order)."""
    top = min(limit, scores.size)
    if top <= 0:
        return np.zeros(0, dtype=np.int64)
    best = np.argpartition(-scores, top - 1)[:top]
    return best[np.argsort(-scores[best], kind="stable")]


MOMENTS = 3  # the most moments an item may have, for searches within a stretch of time


class SearchIndex:
    """Vectors and BM25 documents of one scope's items, by key, each in a group (e.g. a memory category)
    and with up to `MOMENTS` moments (seconds since the epoch), so that a search may keep to a stretch
    of time.

    Not thread-safe: its owner locks around it.
    """

    def __init__(self, dim: int, weights: FusionWeights = FusionWeights()) -> None:
        self.weights = weights
        self._keys: list[str] = []
        self._row: dict[str, int] = {}
        self._vectors = np.zeros((16, dim), dtype=np.float32)
        # beside the vectors, so filtering costs no Python loop (a NaN moment is in no stretch of time)
        self._groups = np.zeros(16, dtype=np.int8)
        self._moments = np.full((16, MOMENTS), np.nan)
        self._lexical = LexicalIndex()

    @property
    def size(self) -> int:
        return len(self._keys)

    def __contains__(self, key: str) -> bool:
        return key in self._row

    def put(
        self,
        key: str,
        *,
        vector: np.ndarray | None = None,
        terms: Terms | None = None,
        group: int | None = None,
        moments: Sequence[float] | None = None,
    ) -> None:
        """Add an item (vector and terms needed) or change the parts given of an existing one."""
        row = self._row.get(key)
        if row is None:
            if vector is None or terms is None:
                raise ValueError("a new item needs its vector and its terms")
            row = self._append_row(key)
            self._lexical.append(terms)
        elif terms is not None:
            self._lexical.replace(row, terms)
        if vector is not None:
            self._vectors[row] = vector
        if group is not None:
            self._groups[row] = group
        if moments is not None:
            self._moments[row] = np.nan
            self._moments[row, : len(moments)] = moments

    def remove(self, keys: Sequence[str]) -> None:
        """Drop items by key (moving the last row into each hole); unknown keys are ignored."""
        for key in keys:
            row = self._row.pop(key, None)
            if row is None:
                continue
            last = len(self._keys) - 1
            if row != last:
                moved = self._keys[last]
                self._keys[row] = moved
                self._vectors[row] = self._vectors[last]
                self._groups[row] = self._groups[last]
                self._moments[row] = self._moments[last]
                self._row[moved] = row
            self._keys.pop()
            self._lexical.swap_remove(row)

    def search(
        self,
        query: Query,
        limit: int,
        groups: Collection[int] | None = None,
        only: Collection[str] | None = None,
        between: tuple[float, float] | None = None,
    ) -> list[Match]:
        """The `limit` most relevant items (of some groups; with `only`, among those keys; with `between`,
        those with a moment from its start up to its end), best first."""
        count = len(self._keys)
        if count == 0 or limit <= 0:
            return []
        kept = np.ones(count, dtype=bool)
        if groups is not None:
            kept &= np.isin(self._groups[:count], list(groups))
        if between is not None:
            moments = self._moments[:count]
            kept &= ((moments >= between[0]) & (moments < between[1])).any(axis=1)
        if only is not None:
            listed = np.zeros(count, dtype=bool)
            listed[self.rows(only)] = True
            kept &= listed
        rows = np.flatnonzero(kept)
        if rows.size == 0:
            return []
        vector, lexical = query.vector.astype(np.float32), self._lexical.scores(query.terms)
        if rows.size < count // 2:  # a few kept (a stretch of time, a category): only their vectors are read
            similarity, lexical = self._vectors[rows] @ vector, lexical[rows]
        else:
            similarity = self._vectors[:count] @ vector
            if rows.size < count:
                similarity, lexical = similarity[rows], lexical[rows]
        relevance = fuse(similarity, lexical, self.weights)
        return [
            Match(self._keys[rows[index]], float(relevance[index]), float(similarity[index]), float(lexical[index]))
            for index in best_first(relevance, limit)
        ]

    def legs(self, query: Query) -> tuple[np.ndarray, np.ndarray]:
        """Each leg's raw score of every item, by row (its place in `keys`): the cosine similarity of the
        embeddings and the BM25 score. For owners that rank with more than the two legs (`history.py`)."""
        count = len(self._keys)
        return self._vectors[:count] @ query.vector.astype(np.float32), self._lexical.scores(query.terms)

    @property
    def keys(self) -> list[str]:
        """The items' keys, by row."""
        return self._keys

    @property
    def vectors(self) -> np.ndarray:
        """The items' vectors, by row (a view: valid until the next change)."""
        return self._vectors[: len(self._keys)]

    def rows(self, keys: Collection[str]) -> list[int]:
        """The rows of the known ones among `keys`."""
        return [self._row[key] for key in keys if key in self._row]

    def _append_row(self, key: str) -> int:
        row = len(self._keys)
        if row == len(self._vectors):
            self._vectors = np.concatenate([self._vectors, np.zeros_like(self._vectors)])
            self._groups = np.concatenate([self._groups, np.zeros_like(self._groups)])
            self._moments = np.concatenate([self._moments, np.full_like(self._moments, np.nan)])
        self._keys.append(key)
        self._row[key] = row
        return row
