"""Benchmark of the daily decay pass (`DecayPass.apply_decay`) over a large store.

What is measured:

* a fresh embedded chromadb (``PersistentClient`` in a ``tempfile.TemporaryDirectory``) and a
  SQLite journal, wrapped by the real ``ChromaKnowledgeBase`` and ``DecayPass``;
* the store is seeded with N memories (default 100,000) spread over 1,000 scopes of one persona:
  70% facts (10% of them already kept once by a decay review, at 0.5), 20% episodes, 10% core;
  ``last_access`` uniform over the past 40 days, all drawn from a seeded ``random.Random``; each is
  written with its ``due_at``, as every write does;
* vectors come from ``RandomUnitEmbedder``: seeded random unit vectors of dimension 384 (the size
  of the real model's), because decay never reads embeddings and embedding 100k texts with the
  real model would take many minutes. chromadb still stores and indexes every vector;
* ``apply_decay()`` is timed on successive days (the clock is ``tests.fakes.clock.FakeClock``); it
  reads only the memories that are due, so its cost follows what it has to do, not the store's size:
  1. **catch-up**: the first pass ever, over a backlog: the facts idle for 21 days or more (about
     45% of them) are below 0.5 and ask for review, the kept facts below 0.3 and the episodes older
     than 14 days are deleted. Reviews are capped at 500 a pass: the rest of the backlog waits,
     unread, for later passes;
  2. **same moment**: at once again: nothing is due, so it is the cost of finding that out;
  3. **day 1 … day N** (``--days``, default 7): the daily job: that day's deletions and 500 of
     the reviews waiting (no review job runs in this bench, so from day 3 on the requests whose
     retry time has come are among them).

Run from the repository root::

    python -m bench.decay                    # 100,000 memories
    python -m bench.decay --memories 10000
    python -m bench.decay --json             # plus one JSON line with every figure
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from knowledge.journal.journal import Journal
from knowledge.memory.chroma_store import ChromaKnowledgeBase, open_chroma_client
from knowledge.memory.decay_pass import DecayPass, DecayReport
from knowledge.records import Category, MemoryRecord, Scope
from tests.fakes.clock import FakeClock

SEED = 20260103
NOW = datetime(2026, 1, 3, 4, 0, tzinfo=UTC)
PERSONA = "xiaoxiang"
DIM = 384
MIX: tuple[tuple[Category, float], ...] = (("fact", 0.7), ("episode", 0.2), ("core", 0.1))
MAX_IDLE_DAYS = 40


class RandomUnitEmbedder:
    """Seeded random unit vectors: the bench needs vectors in the store, not meaningful ones."""

    name = f"bench-random-unit-{DIM}"
    dim = DIM

    def __init__(self, seed: int = SEED) -> None:
        self._rng = np.random.default_rng(seed)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self._rng.standard_normal((len(texts), DIM)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_passages(texts)


def make_records(count: int, scopes: int, rng: random.Random) -> list[MemoryRecord]:
    """`count` memories in the mix above, spread round-robin over `scopes` users."""
    categories, weights = zip(*MIX)
    records = []
    for index in range(count):
        category: Category = rng.choices(categories, weights)[0]
        last_access = NOW - timedelta(seconds=rng.uniform(0, MAX_IDLE_DAYS * 86400))
        kept = category == "fact" and rng.random() < 0.1
        importance = 0.5 if kept else {"fact": 1.0, "episode": 1.0, "core": 3.0}[category]
        records.append(
            MemoryRecord(
                id=f"mem_{index:012x}",
                scope=Scope(PERSONA, f"bench:user-{index % scopes:04d}"),
                content=f"{category} memory number {index}",
                category=category,
                importance=importance,
                created_at=last_access - timedelta(days=0 if category == "episode" else rng.uniform(0, 10)),
                last_access=last_access,
                source="background_ai",
                decay_kept=kept,
            )
        )
    return records


def summary(report: DecayReport) -> dict[str, float | int]:
    """The report's figures, with the list of review requests reduced to its length."""
    return {
        "scanned": report.scanned,
        "deleted": report.deleted,
        "reviews": len(report.reviews),
        "capped": report.capped,
        "rescheduled": report.rescheduled,
        "seconds": round(report.seconds, 3),
    }


def run(memories: int, scopes: int, days: int) -> tuple[float, dict[str, DecayReport]]:
    """Seed a fresh store, then time the passes; returns the seeding seconds and each pass's report."""
    clock = FakeClock(NOW)
    with tempfile.TemporaryDirectory(prefix="companion-bench-decay-") as tmp:
        store = ChromaKnowledgeBase(open_chroma_client(path=Path(tmp) / "chroma"), RandomUnitEmbedder(), now=clock.now)
        journal = Journal(Path(tmp) / "journal.sqlite3")
        records = make_records(memories, scopes, random.Random(SEED))
        started = time.perf_counter()
        store.add_records(records)
        seed_seconds = time.perf_counter() - started
        decay_pass = DecayPass(store, journal.changes, clock.now)
        reports = {"catch_up": decay_pass.apply_decay(), "same_moment": decay_pass.apply_decay()}
        for day in range(1, days + 1):
            clock.advance(days=1)
            reports[f"day_{day}"] = decay_pass.apply_decay()
        journal.close()
    return seed_seconds, reports


def main() -> None:
    """Parse arguments, run the bench and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.decay", description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=100_000, help="memories to seed (default 100000)")
    parser.add_argument("--scopes", type=int, default=1_000, help="users they are spread over (default 1000)")
    parser.add_argument("--days", type=int, default=7, help="daily passes after the catch-up (default 7)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line with every figure")
    args = parser.parse_args()
    seed_seconds, reports = run(args.memories, args.scopes, args.days)
    print(f"seeded {args.memories} memories over {args.scopes} scopes in {seed_seconds:.1f} s")
    for name, report in reports.items():
        print(
            f"{name:12} {report.seconds:6.2f} s: {report.scanned} due, {report.deleted} deleted,"
            f" {len(report.reviews)} reviews{' (capped)' if report.capped else ''}, {report.rescheduled} rescheduled"
        )
    if args.json:
        figures = {"memories": args.memories, "scopes": args.scopes, "seed_seconds": round(seed_seconds, 1)}
        print(json.dumps({**figures, **{name: summary(report) for name, report in reports.items()}}))


if __name__ == "__main__":
    main()
