"""Benchmark of the nightly consolidation over a large store: the CPU it takes besides the model's answers.

What is measured:
* a fresh embedded chromadb and SQLite stores (messages, journal, scheduled passes) under the real
  ``ChromaKnowledgeBase`` and ``Consolidator``, on a fake clock;
* N facts (default 100,000) spread over S scopes (default 100, so 1,000 facts a user: a heavy one), in this mix:
  2% in near-duplicate pairs ("my locker code is 17" / "Alice's locker code is 17"), 3% first-person facts,
  two kinds of 20 old (40 days) never used facts each, the rest ordinary facts; each scope has one message of
  the last day, so every scope is active;
* vectors from a bench embedder that puts each text's kind at a seeded random direction (a duplicate pair and
  the facts of one kind close together, everything else apart): what the rules read, without the minutes the
  real model would take to embed 100k texts;
* the model is an in-process fake that answers at once and sensibly (merges duplicates, rewrites first-person
  facts, folds a kind of 20 into 6), and the CPU its answers take is taken off: the figure is the pass's own;
* three nights are timed: the first ever (every pair of a scope's facts compared), the next one (1% of facts new
  since, compared with all, and what the first left: a first night over a store never consolidated changes 5% of
  it, more than a night folds at once) and a steady one (1% new again, as a store consolidated every night sees).
* of each night's figure, the part spent in chromadb's write calls (adds, upserts, updates, deletes: the process's CPU
  while one runs, its own threads included; a night makes one call at a time) is shown apart, by kind.

What a night's figure counts: the CPU of the whole process (chromadb's own threads included) from the scopes due
to the last night claimed: each scope's facts and vectors read, its candidate groups found, the prompts built,
the answers read and checked, the effects planned and saved, and every write (the change log, the scope's
memory ids, dead letters, chromadb's adds, updates and deletes, the night's claim). Not counted: the model's
answers (the fake's own CPU is taken off); vectors come from the bench embedder, so embedding the merged and
rewritten texts with the real model (`bench.embedding`) is not counted either. The snapshots are held, as a
running bot holds its active users'; "finding cold" shows what reading every user's facts from chromadb first
adds (after a restart).

Run from the repository root::

    python -m bench.consolidation                     # 100,000 facts over 100 scopes
    python -m bench.consolidation --memories 10000 --scopes 10 --json
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from chromadb.api.models.Collection import Collection

from bench.stats import cpu_model
from core.background.consolidation.consolidator import Consolidator
from core.types import ChatMessage
from knowledge.conversations.message_log import MessageLog
from knowledge.conversations.working_memory import WorkingMemory
from knowledge.journal.journal import Journal
from knowledge.memory.chroma_store import ChromaKnowledgeBase, open_chroma_client
from knowledge.memory.scope_ids import ScopeIds
from knowledge.records import MemoryRecord, Scope
from knowledge.rules.consolidation import pass_name
from knowledge.sql.scheduled_passes import ScheduledPasses
from knowledge.sql.sqlite import SQLiteDatabase
from personas.loader import PersonaRegistry
from tests.fakes.clock import FakeClock

SEED = 20270104
NOW = datetime(2027, 1, 4, 3, 0, tzinfo=UTC)
PERSONA = "xiaoxiang"
DIM = 384
KIND = re.compile(r"\[(k[^\]]+)\]")
CHROMADB_WRITES = ("add", "upsert", "update", "delete")
NIGHTS = ("first", "next", "steady")


class KindEmbedder:
    """A seeded random direction per kind (the `[kN]` a text carries), a little noise per text."""

    name = f"bench-kinds-{DIM}"
    dim = DIM

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        vectors = np.stack([self._vector(text) for text in texts]).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_passages(texts)

    def _vector(self, text: str) -> np.ndarray:
        found = KIND.search(text)
        kind = found[1] if found else text
        base = np.random.default_rng(int(hashlib.sha256(kind.encode()).hexdigest()[:12], 16)).standard_normal(DIM)
        noise = np.random.default_rng(int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)).standard_normal(DIM)
        spread = 0.3 if "old" in kind else 0.05  # a kind's facts about 0.92 apart; a duplicate pair about 0.999
        return base / np.linalg.norm(base) + spread * noise / np.linalg.norm(noise)


class FastModel:
    """The model, answering at once: duplicates merged, first-person facts rewritten, a kind folded into fewer.
    It counts its calls and the CPU its answers take (taken off the pass's figure)."""

    def __init__(self) -> None:
        self.calls = 0
        self.cpu = 0.0

    def settings(self, role: str) -> Any:
        raise NotImplementedError

    async def complete(self, messages: Sequence[ChatMessage], *, role: str, choice: Any = None) -> str:
        started = time.process_time()
        self.calls += 1
        system, prompt = messages[0].content, messages[1].content  # the facts; a retry adds why after them
        listed = prompt.split("<<<FACTS\n", 1)[1].split("\nFACTS>>>", 1)[0].splitlines()
        facts = [line.split("] ", 1)[1] for line in listed]
        if "first person" in system:
            answer = "\n".join(f"[REWRITE {n}] {fact.replace('my ', 'Alice’s ')}" for n, fact in enumerate(facts, 1))
        elif "say the same thing" in system:
            answer = f"[MERGE {','.join(str(n) for n in range(1, len(facts) + 1))}] {facts[-1]}"
        else:
            parts = [list(range(start, len(facts) + 1, 6)) for start in range(1, 7)]
            answer = "\n".join(
                f"[MERGE {','.join(map(str, part))}] " + " / ".join(facts[n - 1] for n in part) for part in parts
            )
        self.cpu += time.process_time() - started
        return answer


def make_facts(count: int, scopes: int, rng: random.Random) -> list[MemoryRecord]:
    """`count` facts in the mix above, spread evenly over `scopes` users."""
    records: list[MemoryRecord] = []
    per_scope = count // scopes
    for user in range(scopes):
        scope = Scope(PERSONA, f"bench:user-{user:04d}")
        texts: list[tuple[str, int]] = []
        for pair in range(per_scope // 100):  # 2%: duplicate pairs
            code = rng.randrange(10_000)
            texts += [
                (f"my locker code is {code} [k{user}-d{pair}]", 1),
                (f"Alice's locker code is {code} [k{user}-d{pair}]", 5),
            ]
        texts += [(f"my hobby number {n} is fun", 2) for n in range(per_scope * 3 // 100)]  # 3%: first person
        texts += [(f"Alice tried dish {n} [k{user}-old{n % 2}]", 40) for n in range(40)]  # two old kinds of 20
        texts += [(f"Alice fact {n} of user {user}", 3) for n in range(per_scope - len(texts))]
        for index, (text, days_old) in enumerate(texts):
            made = NOW - timedelta(days=days_old, minutes=index)
            records.append(
                MemoryRecord(
                    id=f"mem_{len(records):012x}",
                    scope=scope,
                    content=text,
                    category="fact",
                    importance=1.0,
                    created_at=made,
                    last_access=made,
                    source="background_ai",
                )
            )
    return records


def finding(consolidator: Consolidator, passes: ScheduledPasses) -> dict[str, float | int]:
    """The code's half of a night: the scopes due, then each one's facts, vectors and candidate groups."""
    started = time.process_time()
    due = consolidator.due()
    groups = sum(len(consolidator.candidates(scope, passes.last(pass_name(scope)))) for scope, _ in due)
    return {"scopes": len(due), "groups": groups, "cpu_seconds": round(time.process_time() - started, 2)}


@contextmanager
def chromadb_writes_timed(spent: dict[str, float]) -> Iterator[None]:
    """While open, the process's CPU during each chromadb write call is added to `spent` by kind."""
    originals = {name: getattr(Collection, name) for name in CHROMADB_WRITES}

    def timed(name: str, write: Any) -> Any:
        def call(self: Collection, *args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return write(self, *args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - started

        return call

    for name, write in originals.items():
        setattr(Collection, name, timed(name, write))
    try:
        yield
    finally:
        for name, write in originals.items():
            setattr(Collection, name, write)


async def night(consolidator: Consolidator, model: FastModel, persona: Any) -> dict[str, Any]:
    """One nightly pass over every scope due, as its jobs run it; the CPU it takes besides the model's answers, and
    the part of it in chromadb's writes."""
    calls, model_cpu = model.calls, model.cpu
    started, wall = time.process_time(), time.perf_counter()
    merged = rewritten = 0
    writes: dict[str, float] = {}
    with chromadb_writes_timed(writes):
        for scope, moment in await asyncio.to_thread(consolidator.due):
            report = await consolidator.consolidate(persona, scope, moment)
            if report is not None:
                merged, rewritten = merged + report.merged, rewritten + report.rewritten
    return {
        "model_calls": model.calls - calls,
        "facts_merged_away": merged,
        "facts_rewritten": rewritten,
        "cpu_seconds": round(time.process_time() - started - (model.cpu - model_cpu), 2),
        "chromadb_writes_cpu_seconds": {name: round(seconds, 2) for name, seconds in sorted(writes.items())},
        "wall_seconds": round(time.perf_counter() - wall, 2),
    }


def new_facts(records: list[MemoryRecord], share: float, now: datetime, rng: random.Random) -> list[MemoryRecord]:
    """A day's new facts: `share` of the store, one in ten saying again what a fact of its scope says."""
    fresh = []
    for index, record in enumerate(rng.sample(records, int(len(records) * share))):
        text = record.content if index % 10 == 0 else f"Alice new fact {index} of {record.scope.user_id}"
        fresh.append(replace(record, content=text, created_at=now, last_access=now))
    return fresh


async def run(memories: int, scopes: int) -> dict[str, Any]:
    clock = FakeClock(NOW)
    with tempfile.TemporaryDirectory(prefix="companion-bench-consolidation-") as tmp:
        files = Path(tmp)
        ids = ScopeIds(SQLiteDatabase(files / "companion.sqlite3"))  # each scope's memory ids, as the app keeps them
        store = ChromaKnowledgeBase(open_chroma_client(path=files / "chroma"), KindEmbedder(), now=clock.now, ids=ids)
        journal, talk = Journal(files / "journal.sqlite3"), WorkingMemory(MessageLog(files / "messages.sqlite3"))
        passes = ScheduledPasses(files / "passes.sqlite3")
        records = make_facts(memories, scopes, random.Random(SEED))
        seeding = time.perf_counter()
        store.add_records(records)
        seed_seconds = time.perf_counter() - seeding
        for user in sorted({record.scope.user_id for record in records}):
            talk.append(
                PERSONA, f"dm:{user}", role="user", user_id=user, speaker_name="Alice", content="hi", sent_at=NOW
            )
        model = FastModel()
        consolidator = Consolidator(
            model,  # type: ignore[arg-type]
            store,
            journal.changes,
            journal.jobs,
            talk.log,
            clock,
            last_pass=passes.last,
            claim=passes.claim,
            hour=3,
        )
        persona = PersonaRegistry().get(PERSONA)
        figures: dict[str, Any] = {"finding_cold": finding(consolidator, passes)}  # snapshots loaded from chromadb
        figures["finding_warm"] = finding(consolidator, passes)  # snapshots held, as a running bot holds them
        figures["first_night"] = await night(consolidator, model, persona)
        for following, seed in zip(NIGHTS[1:], (SEED + 1, SEED + 2), strict=True):
            clock.advance(days=1)
            for fact in new_facts(records, 0.01, clock.now(), random.Random(seed)):  # as the monitor adds them
                store.add(fact.scope, fact.content, category="fact", source="background_ai")
            figures[f"{following}_finding_warm"] = finding(consolidator, passes)
            figures[f"{following}_night"] = await night(consolidator, model, persona)
        journal.close()
        talk.close()
        passes.close()
        ids.close()
    return {
        "cpu": cpu_model(),
        "memories": memories,
        "scopes": scopes,
        "seed_seconds": round(seed_seconds, 1),
    } | figures


def summary(night: str, figures: dict[str, Any]) -> str:
    writes = round(sum(figures["chromadb_writes_cpu_seconds"].values()), 2)
    return f"{night} night {figures['cpu_seconds']} s ({writes} s in chromadb's writes)"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.consolidation", description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=100_000, help="facts to seed (default 100000)")
    parser.add_argument("--scopes", type=int, default=100, help="users they are spread over (default 100)")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()
    figures = asyncio.run(run(args.memories, args.scopes))
    if not args.json:
        print(f"CPU: {figures['cpu']}")
        print(f"{args.memories} facts over {args.scopes} scopes (seeded in {figures['seed_seconds']} s)")
        following = [f"{night}_{part}" for night in NIGHTS[1:] for part in ("finding_warm", "night")]
        for name in ("finding_cold", "finding_warm", "first_night", *following):
            print(f"{name.replace('_', ' ')}: {figures[name]}")
        nights = ", ".join(summary(night, figures[f"{night}_night"]) for night in NIGHTS)
        print(f"the whole pass at {args.memories} memories, CPU besides the model's answers: {nights}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
