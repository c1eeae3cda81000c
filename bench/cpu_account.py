"""Where a turn's CPU goes: thread CPU time measured at the seams of the real code path.

The seams are wrapped while a benchmark runs, never the pipeline's steps: the embedder (which counts
the CPU of its own lane threads, `knowledge.search.embedding.CPUMeter`), the hybrid search (memories and
past messages, and keeping the history index), the prompt (`PromptBuilder`), SQLite (every statement
goes through `knowledge.sql.sqlite.SQLiteDatabase`) and chromadb (its `Collection`). Each seam is timed
with `time.thread_time()` in the thread that runs it, exclusive of the seams it calls (a search's
SQLite reads count as SQLite), so nothing is counted twice. The event loop is the main thread's CPU
less the seams it ran itself (storing a message, building the prompt). What no seam covers is
"other threads": the background roles' own logic in worker threads, HTTP clients, chromadb's internal
threads. The benchmark's fake servers (the LLM, the Bot API) run in the same process but are not the
companion: their request handlers (http.server's) are a seam of their own, shown apart and left out of "total".

With the default of one OpenMP thread per embedding call the embedder's figure is exact; with more,
the extra threads' CPU lands in "other threads".
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from chromadb.api.models.Collection import Collection

from core.reply.prompt import PromptBuilder
from knowledge.conversations.history import ConversationHistory
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.search.embedding import CPUMeter
from knowledge.sql.sqlite import SQLiteDatabase

COMPONENTS = (
    "query embedding",
    "passage embeddings",
    "search",
    "prompt",
    "SQLite",
    "chromadb",
    "event loop",
    "other threads",
)
FAKES = "fake servers"  # the benchmark's, not the companion's: outside "total"
_SEAMS: list[tuple[type, str, str]] = [
    (ChromaKnowledgeBase, "search", "search"),
    (ConversationHistory, "search", "search"),
    (ConversationHistory, "index_pending", "search"),
    (PromptBuilder, "build", "prompt"),
    (PromptBuilder, "check_fits", "prompt"),
    (SQLiteDatabase, "query", "SQLite"),
    (SQLiteDatabase, "checkpoint", "SQLite"),
    (SQLiteDatabase, "create", "SQLite"),
    *((Collection, method, "chromadb") for method in ("add", "upsert", "update", "delete", "get", "query", "count")),
    # counted by the embedder's own meter; a seam here only so that an embedder computing in the caller's
    # thread (the numpy fallback) is not counted again in the seam that called it
    (CPUMeter, "timed", "embedding"),
    # only the fakes serve with http.server; a request at a time, as a keep-alive connection lasts the whole run
    (BaseHTTPRequestHandler, "handle_one_request", FAKES),
]


class _Span:
    __slots__ = ("children", "component", "started")

    def __init__(self, component: str) -> None:
        self.component = component
        self.started = time.thread_time()
        self.children = 0.0


class CPUAccount:
    """Cumulative CPU seconds by component; `snapshot()` twice and subtract for one turn or one run."""

    def __init__(self, embedding: CPUMeter) -> None:
        self._embedding = embedding
        self._lock = threading.Lock()
        self._seconds: dict[str, float] = defaultdict(float)
        self._main_seams = 0.0  # seam CPU spent on the main thread (the event loop's)
        self._local = threading.local()
        self._main = threading.main_thread().ident

    @contextmanager
    def instrumented(self) -> Iterator[CPUAccount]:
        """The seams wrapped while the block runs (call it from the main thread, the event loop's)."""
        originals = [(owner, name, owner.__dict__[name]) for owner, name, _ in _SEAMS]
        originals.append((SQLiteDatabase, "transaction", SQLiteDatabase.__dict__["transaction"]))
        try:
            for owner, name, component in _SEAMS:
                setattr(owner, name, self._timed(owner.__dict__[name], component))
            SQLiteDatabase.transaction = self._timed_transaction(SQLiteDatabase.__dict__["transaction"])
            yield self
        finally:
            for owner, name, original in originals:
                setattr(owner, name, original)

    def snapshot(self) -> dict[str, float]:
        """CPU seconds so far by component, `total` (the whole process but the fake servers) and the fake servers'.
        Call it from the main thread."""
        embedding = self._embedding.seconds()
        with self._lock:
            seams = dict(self._seconds)
            main_seams = self._main_seams
        figures = {component: seams.get(component, 0.0) for component in COMPONENTS}
        figures["query embedding"] = embedding["query"]
        figures["passage embeddings"] = embedding["passage"]
        figures["event loop"] = time.thread_time() - main_seams
        fakes = seams.get(FAKES, 0.0)
        total = time.process_time() - fakes
        figures["other threads"] = total - sum(figures[component] for component in COMPONENTS[:-1])
        figures["total"] = total
        figures[FAKES] = fakes
        return figures

    def _timed(self, method: Callable[..., Any], component: str) -> Callable[..., Any]:
        account = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            span = account._enter(component)
            try:
                return method(*args, **kwargs)
            finally:
                account._leave(span)

        return timed

    def _timed_transaction(self, transaction: Callable[..., Any]) -> Callable[..., Any]:
        account = self

        @contextmanager
        def timed(database: SQLiteDatabase) -> Iterator[Any]:
            span = account._enter("SQLite")
            try:
                with transaction(database) as connection:
                    yield connection
            finally:
                account._leave(span)

        return timed

    def _enter(self, component: str) -> _Span:
        stack = self._local.__dict__.setdefault("stack", [])
        span = _Span(component)
        stack.append(span)
        return span

    def _leave(self, span: _Span) -> None:
        stack: list[_Span] = self._local.stack
        stack.pop()
        spent = time.thread_time() - span.started
        if stack:
            stack[-1].children += spent
        with self._lock:
            self._seconds[span.component] += spent - span.children
            if threading.get_ident() == self._main:
                self._main_seams += spent - span.children


def per_turn_ms(before: dict[str, float], after: dict[str, float], turns: int) -> dict[str, float]:
    """Milliseconds of CPU per turn by component between two snapshots."""
    return {name: round((after[name] - before[name]) * 1000 / turns, 2) for name in (*COMPONENTS, "total", FAKES)}


def print_account(title: str, figures: dict[str, dict[str, float]] | dict[str, float]) -> None:
    """One line per component: a value, or p50 / mean when `figures` holds summaries."""
    print(title)
    for name in (*COMPONENTS, "total", FAKES):
        value = figures[name]
        if isinstance(value, dict):
            print(f"  {name:<20} p50 {value['p50']:7.2f}   p95 {value['p95']:7.2f}   mean {value['mean']:7.2f}")
        else:
            print(f"  {name:<20} {value:7.2f}")
