"""Benchmark of reading one user's memories whole, as a turn's first search, `/memory` and the console do: by the
ids each scope lists in SQL (`knowledge/memory/scope_ids.py`) against chromadb's scan of the collection's metadata.

`--users` users of `--memories` memories each are written into an embedded chromadb store (seeded random vectors:
nothing is searched by meaning). Two stores then read the same collection, one by the listed ids and one by the
scan, each user once (a cold read: the scope's snapshot is loaded), `--reads` users picked at random (seeded), the
two reads of a user one after the other in alternating order, so both meet the same load of the machine. Also
timed: listing every memory of the store once, as the first start with the list does.

Figures are p50 / p95 / mean / max in milliseconds, with the processor and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.decay import RandomUnitEmbedder
from bench.stats import cpu_model, load_average, summarize
from knowledge.memory.chroma_store import MAINTENANCE_PAGE, ChromaKnowledgeBase, open_chroma_client
from knowledge.memory.scope_ids import ScopeIds
from knowledge.records import MemoryRecord, Scope
from knowledge.sql.sqlite import SQLiteDatabase

SEED = 20261127
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def user(index: int) -> Scope:
    return Scope("xiaoxiang", f"bench:user-{index:05d}")


def record(index: int, number: int) -> MemoryRecord:
    return MemoryRecord(
        id=f"mem_{index:05d}{number:07d}", scope=user(index), content=f"fact number {number} about user {index}",
        category="fact", importance=1.0, created_at=NOW - timedelta(days=number % 90), last_access=NOW,
        source="background_ai",
    )  # fmt: skip


def run(users: int, memories: int, reads: int) -> dict[str, object]:
    embedder = RandomUnitEmbedder()
    with tempfile.TemporaryDirectory(prefix="companion-bench-scope-reads-") as tmp:
        client = open_chroma_client(path=Path(tmp) / "chroma")
        ids = ScopeIds(SQLiteDatabase(Path(tmp) / "companion.sqlite3"))
        started = time.perf_counter()
        writer = ChromaKnowledgeBase(client, embedder, now=lambda: NOW, ids=ids, cache_scopes=False)
        written = [record(index, number) for index in range(users) for number in range(memories)]
        for start in range(0, len(written), MAINTENANCE_PAGE):
            writer.add_records(written[start : start + MAINTENANCE_PAGE])
        seconds = time.perf_counter() - started
        started = time.perf_counter()
        ChromaKnowledgeBase(client, embedder, now=lambda: NOW, ids=ScopeIds(SQLiteDatabase(Path(tmp) / "fresh.db")))
        listing = time.perf_counter() - started
        by_ids = ChromaKnowledgeBase(client, embedder, now=lambda: NOW, ids=ids)
        by_scan = ChromaKnowledgeBase(client, embedder, now=lambda: NOW)
        took: dict[str, list[float]] = {"by_ids": [], "by_scan": []}
        warm, *chosen = random.Random(SEED).sample(range(users), min(reads + 1, users))
        for store in (by_ids, by_scan):  # the first read of each store pays for more than the read
            store.memories(user(warm))
        for turn, index in enumerate(chosen):
            order = [("by_ids", by_ids), ("by_scan", by_scan)]
            for name, store in order if turn % 2 else order[::-1]:
                begun = time.perf_counter()
                found = store.memories(user(index))
                took[name].append((time.perf_counter() - begun) * 1000)
                assert len(found) == memories
        figures = {name: summarize(values) for name, values in took.items()}
    return {
        "users": users,
        "memories_per_user": memories,
        "seed_seconds": round(seconds, 1),
        "first_listing_seconds": round(listing, 2),
        "p50_ratio": round(figures["by_scan"]["p50"] / figures["by_ids"]["p50"], 1),
        "p95_ratio": round(figures["by_scan"]["p95"] / figures["by_ids"]["p95"], 1),
    } | figures


def main() -> None:
    """Parse arguments, run the bench and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.scope_reads", description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000, help="users (default 1000)")
    parser.add_argument("--memories", type=int, default=100, help="memories per user (default 100)")
    parser.add_argument("--reads", type=int, default=200, help="users read, each once by each store (default 200)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line with every figure")
    args = parser.parse_args()
    figures = run(args.users, args.memories, args.reads)
    print(f"{cpu_model()}; load {load_average()}")
    print(
        f"{args.users} users x {args.memories} memories; seeded in {figures['seed_seconds']} s; every memory "
        f"listed once in {figures['first_listing_seconds']} s"
    )
    for name in ("by_ids", "by_scan"):
        value = figures[name]
        assert isinstance(value, dict)
        print(f"{name:8} p50 {value['p50']:8} p95 {value['p95']:8} mean {value['mean']:8} max {value['max']:8} ms")
    print(f"scan / ids: p50 {figures['p50_ratio']}x, p95 {figures['p95_ratio']}x")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
