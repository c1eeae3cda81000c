"""Benchmark of the profile and ongoing threads: what they cost a turn, the hourly pass, and the prompt.

Three figures, on the embedded SQLite store the product uses (a temporary file), with `--scopes` users
(default 10,000) each holding a written profile (about 250 tokens, English and Chinese alternating) and
`--threads` active threads (default 3):

1. **per turn**: reading one user's profile and active threads (`Profiles.get` + `OngoingThreads.active`),
   what every reply does before its prompt is built, p50/p95 over `--reads` random users;
2. **the hourly pass**: `Profiles.due` with a tenth of the users marked (their facts changed) and half of
   those written more than a day ago, median of 5 passes;
3. **prompt tokens**: what the profile and the Now section's thread lines add to a prompt, counted with the
   project's token counter (`core.llm.client.count_tokens`), for the largest profile allowed and 8 threads.

No model is called: writing a profile is one summarizer call a day at most per user, measured by the model
server, not here. Run from the repository root::

    python -m bench.profiles
    python -m bench.profiles --scopes 1000 --reads 500
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from core.background.profile_writer import PROFILE_TOKENS, fitted
from core.llm.client import count_tokens
from core.reply.time_context import threads_lines
from knowledge.journal.ongoing_threads import MAX_ACTIVE_THREADS, OngoingThread, OngoingThreads
from knowledge.journal.profiles import Profile, Profiles
from knowledge.records import Scope
from knowledge.sql.sqlite import SQLiteDatabase

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
ENGLISH = "Alice is a nurse in Leeds who works night shifts. Her sister Anna visits on Sundays. " * 12
CHINESE = "主人是上海的护士，常上夜班。妹妹小美每周日来看她，她们一起去吃拉面。" * 12


def _portrait(index: int) -> str:
    return fitted(CHINESE if index % 2 else ENGLISH, PROFILE_TOKENS)


def _fill(profiles: Profiles, threads: OngoingThreads, scopes: list[Scope], per_user: int) -> None:
    for index, scope in enumerate(scopes):
        written = NOW - timedelta(days=2 if index % 20 == 0 else 0, hours=1)
        profiles.write(scope, Profile(_portrait(index), ("mem_1", "mem_2", "mem_3"), "b", "background", written),
                       requested_at=written)  # fmt: skip
        if index % 10 == 0:
            profiles.mark_changed(scope, NOW - timedelta(minutes=5))
        for number in range(per_user):
            threads.open(scope, f"thr_{index}_{number}", f"thread {number}", "latest news of it", since=written,
                         at=written, message_ids=[f"msg_{index}_{number}"], place=None)  # fmt: skip


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    """Run the three measurements and print them, then one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scopes", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--reads", type=int, default=2_000)
    options = parser.parse_args()
    scopes = [Scope("xiaoxiang", f"telegram:{number}") for number in range(options.scopes)]
    with tempfile.TemporaryDirectory() as directory:
        db = SQLiteDatabase(Path(directory) / "companion.sqlite3")
        profiles, threads = Profiles(db), OngoingThreads(db)
        started = time.perf_counter()
        _fill(profiles, threads, scopes, options.threads)
        fill_seconds = time.perf_counter() - started
        chosen = random.Random(7)
        reads = []
        for _ in range(options.reads):
            scope = chosen.choice(scopes)
            began = time.perf_counter()
            profiles.get(scope)
            threads.active(scope)
            reads.append((time.perf_counter() - began) * 1000)
        passes = []
        for _ in range(5):
            began = time.perf_counter()
            due = profiles.due(NOW)
            passes.append((time.perf_counter() - began) * 1000)
        db.close()
    profile_tokens = count_tokens(_portrait(0))
    many = [
        OngoingThread(f"thr_{n}", f"thread {n}", "latest news of it", NOW, NOW, None, (), (None,))
        for n in range(MAX_ACTIVE_THREADS)
    ]
    thread_tokens = count_tokens(threads_lines(many, NOW, "主人"))
    figures = {
        "scopes": options.scopes,
        "threads_per_user": options.threads,
        "fill_seconds": round(fill_seconds, 1),
        "turn_read_ms_p50": round(_percentile(reads, 0.5), 3),
        "turn_read_ms_p95": round(_percentile(reads, 0.95), 3),
        "hourly_pass_ms_median": round(statistics.median(passes), 2),
        "due_in_pass": len(due),
        "profile_tokens_max": profile_tokens,
        "thread_lines_tokens_8": thread_tokens,
    }
    p50, p95 = figures["turn_read_ms_p50"], figures["turn_read_ms_p95"]
    print(f"per turn, profile + threads read: p50 {p50} ms, p95 {p95} ms")
    print(f"hourly pass over {options.scopes} users: {figures['hourly_pass_ms_median']} ms, {len(due)} due")
    print(f"prompt: profile {profile_tokens} tokens (limit {PROFILE_TOKENS}), 8 threads {thread_tokens} tokens")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
