"""Benchmark of the operator console: its pages and API with many users of many memories, and what keeping a
reply's trace adds to a turn.

A fresh data directory gets `--users` users with `--memories` memories each (embedded chromadb with seeded random
vectors: the console never searches by meaning), one message each so they are listed, and `--traces` reply traces
each. The console (`bot.console.server.console_app`) is asked in process through httpx's ASGI transport, so the
figures are the console's own time, without a network: each endpoint `--requests` times, for users picked at random
(seeded). The trace cost is `ReplyTraces.record` plus counting the reply's tokens, as the end of a turn does it,
timed `--requests` times into the filled table.

Figures are p50 / p95 / mean / max in milliseconds, with the processor and the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from bench.decay import RandomUnitEmbedder
from bench.stats import cpu_model, load_average, summarize
from bot.app import App, build_app
from bot.config import Settings
from bot.console.access import Access
from bot.console.server import console_app
from core.llm.client import count_tokens
from knowledge.journal.reply_traces import ReplyTrace
from knowledge.records import MemoryRecord, Scope
from tests.fakes.clock import FakeClock

SEED = 20261127
PERSONA = "xiaoxiang"
TOKEN = "bench-token"
NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
REPLY = "That sounds lovely; tell me how the trip to Lisbon goes when you are back!"


def user(index: int) -> Scope:
    return Scope(PERSONA, f"bench:user-{index:05d}")


def seed(app: App, users: int, memories: int, traces: int) -> float:
    """Fill the stores; returns the seconds it took."""
    started = time.perf_counter()
    batch: list[MemoryRecord] = []
    for index in range(users):
        scope = user(index)
        app.working_memory.append(
            PERSONA, f"dm:{scope.user_id}", role="user", user_id=scope.user_id, speaker_name=f"User {index}",
            content="hello", sent_at=NOW - timedelta(minutes=index),
        )  # fmt: skip
        for number in range(memories):
            batch.append(
                MemoryRecord(
                    id=f"mem_{index:05d}{number:07d}",
                    scope=scope,
                    content=f"fact number {number} about user {index}",
                    category="fact",
                    importance=1.0 + number % 5 / 2,
                    created_at=NOW - timedelta(days=number % 90),
                    last_access=NOW,
                    source="background_ai",
                )
            )
        for number in range(traces):
            app.journal.traces.record(trace(scope, f"{index}-{number}", batch[-memories:][:8]))
        if len(batch) >= 5_000:
            app.knowledge.add_records(batch)
            batch = []
    app.knowledge.add_records(batch)
    return time.perf_counter() - started


def trace(scope: Scope, key: str, shown: list[MemoryRecord]) -> ReplyTrace:
    return ReplyTrace(
        scope=scope,
        conversation_id=f"dm:{scope.user_id}",
        message_id=f"msg_in_{key}",
        reply_id=f"msg_out_{key}",
        at=NOW,
        model="chat-model",
        prompt_tokens=1800,
        completion_tokens=count_tokens(REPLY),
        first_ms=400,
        total_ms=1200,
        window_messages=12,
        memory_ids=tuple(record.id for record in shown),
        message_ids=("msg_a", "msg_b", "msg_c"),
    )


async def timed(requests: int, ask: Callable[[int], Awaitable[httpx.Response]]) -> dict[str, float]:
    """`ask(i)` `requests` times; each answer must be a success."""
    took = []
    for index in range(requests):
        started = time.perf_counter()
        response = await ask(index)
        took.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text[:200]
    return summarize(took)


async def run(users: int, memories: int, traces: int, requests: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="companion-bench-console-") as tmp:
        settings = Settings(storage={"data_dir": Path(tmp)}, llm={"base_url": "http://127.0.0.1:9"})
        app = await build_app(settings, clock=FakeClock(NOW), embedder=RandomUnitEmbedder(), background=False)
        async with app:
            seconds = await asyncio.to_thread(seed, app, users, memories, traces)
            picks = random.Random(SEED)
            chosen = [user(picks.randrange(users)) for _ in range(requests)]
            transport = httpx.ASGITransport(app=console_app(app, Access(TOKEN)))
            async with httpx.AsyncClient(transport=transport, base_url="http://console.bench") as client:
                logged_in = await client.post("/login", data={"token": TOKEN})
                assert logged_in.status_code == 303
                bearer = {"authorization": f"Bearer {TOKEN}"}

                def of(scope: Scope) -> dict[str, str]:
                    return {"persona": scope.persona_id, "user": scope.user_id}

                def search(scope: Scope) -> dict[str, str]:
                    return {"q": scope.user_id[-4:]}  # the last digits: a few users match

                figures = {
                    "api_scopes": await timed(requests, lambda i: client.get("/api/scopes", headers=bearer)),
                    "api_scopes_search": await timed(
                        requests,
                        lambda i: client.get("/api/scopes", params={"q": chosen[i].user_id[-4:]}, headers=bearer),
                    ),
                    "api_memories": await timed(
                        requests, lambda i: client.get("/api/memories", params=of(chosen[i]), headers=bearer)
                    ),
                    "api_replies": await timed(
                        requests, lambda i: client.get("/api/replies", params=of(chosen[i]), headers=bearer)
                    ),
                    "page_users": await timed(requests, lambda i: client.get("/")),
                    "page_memories": await timed(requests, lambda i: client.get("/memories", params=of(chosen[i]))),
                    "page_replies": await timed(requests, lambda i: client.get("/replies", params=of(chosen[i]))),
                }
            keep = []
            shown = app.knowledge.memories(chosen[0])[:8]
            for index in range(requests):
                started = time.perf_counter()
                app.journal.traces.record(trace(chosen[0], f"timed-{index}", shown))
                keep.append((time.perf_counter() - started) * 1000)
            figures["trace_per_turn"] = summarize(keep, digits=3)
    return {
        "users": users,
        "memories_per_user": memories,
        "traces_per_user": traces,
        "seed_seconds": round(seconds, 1),
    } | figures


def main() -> None:
    """Parse arguments, run the bench and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000, help="users (default 1000)")
    parser.add_argument("--memories", type=int, default=100, help="memories per user (default 100)")
    parser.add_argument("--traces", type=int, default=20, help="reply traces per user (default 20)")
    parser.add_argument("--requests", type=int, default=200, help="requests per endpoint (default 200)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line with every figure")
    args = parser.parse_args()
    figures = asyncio.run(run(args.users, args.memories, args.traces, args.requests))
    print(f"{cpu_model()}; load {load_average()}")
    print(
        f"{args.users} users x {args.memories} memories, {args.traces} traces each; seeded in "
        f"{figures['seed_seconds']} s"
    )
    for name, value in figures.items():
        if isinstance(value, dict):
            print(f"{name:18} p50 {value['p50']:8} p95 {value['p95']:8} mean {value['mean']:8} max {value['max']:8} ms")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
