"""How long `/forget` takes, and whether the bot keeps answering other users meanwhile.

One user has 10,000 stored messages (indexed as history) and 1,000 memories, beside other users; the
bench times the product's own `Forgetting.everything` (the `/forget` route: deletes, change log, jobs,
memory files, chromadb's remnants and VACUUM, the WAL checkpoint) and `/forget <what>` for a code that
50 of the messages carry. While each forget runs, other users chat through `Companion.handle` with the
fake OpenAI server answering, and their reply times are compared with the same chats without a forget.

    .venv/bin/python -m bench.forget [--messages 10000] [--memories 1000] [--others 5] [--json]

Embeddings are random unit vectors (`bench.decay.RandomUnitEmbedder`): forgetting never embeds, and
filling the store with a real model would take minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.decay import RandomUnitEmbedder
from bench.stats import cpu_model, summarize
from bot.app import App, build_app
from bot.config import Settings
from knowledge.journal.change_log import LoggedChange
from knowledge.records import MemoryRecord, Scope, new_memory_id
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer

CODE = "ZQX-4471"
CODE_EVERY = 200  # one message in this many carries the code
TARGET_SECONDS = 2.0


def fill(app: App, scope: Scope, messages: int, memories: int, start: datetime) -> None:
    """Store `messages` messages and `memories` memories of `scope`, as a long acquaintance leaves them."""
    for index in range(messages):
        text = f"message {index} about the garden and tea" + (f", my code is {CODE}" if index % CODE_EVERY == 0 else "")
        app.working_memory.append(
            scope.persona_id,
            f"dm:{scope.user_id}",
            role="user" if index % 2 == 0 else "assistant",
            user_id=scope.user_id,
            speaker_name="Alice",
            content=text,
            sent_at=start + timedelta(minutes=index),
        )
    app.history.index_pending()
    records = [
        MemoryRecord(
            id=new_memory_id(),
            scope=scope,
            content=f"fact {index}: Alice likes variety {index} of tea" + (f" ({CODE})" if index % 100 == 0 else ""),
            category="fact" if index % 10 else "episode",
            importance=1.0,
            created_at=start,
            last_access=start,
            source="background_ai",
        )
        for index in range(memories)
    ]
    app.companion.knowledge.add_records(records)
    app.journal.changes.record_changes(
        (scope, LoggedChange(record.id, "update", "background_ai", "an older version", record.content, "", start))
        for record in records[:100]
    )
    for index in range(20):
        app.journal.jobs.dead_letter(
            "monitor", scope, {"turn": {"user_text": f"{CODE} {index}"}}, "unreadable", at=start
        )


async def chat_while(app: App, others: list[Scope], work: asyncio.Future[object] | None, turns: int) -> list[float]:
    """Reply times (ms) of the other users' turns, sent one after another per user, all users at once."""
    latencies: list[float] = []

    async def user(scope: Scope) -> None:
        for index in range(turns):
            started = time.perf_counter()
            result = await app.companion.handle(make_message(f"hello {index}", user_id=scope.user_id))
            await result.text()
            latencies.append((time.perf_counter() - started) * 1000)
            if work is not None and work.done():
                return

    await asyncio.gather(*(user(scope) for scope in others))
    return latencies


async def timed_forget(app: App, others: list[Scope], forget: object) -> tuple[float, list[float]]:
    started = time.perf_counter()
    task = asyncio.ensure_future(forget)  # type: ignore[arg-type]
    latencies = await chat_while(app, others, task, turns=1000)
    await task
    return time.perf_counter() - started, latencies


async def run(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-forget-") as tmp, FakeOpenAIServer() as fake:
        fake.set_default("chat-model", "ok, noted")
        fake.set_default("monitor-model", "[SKIP]")
        settings = Settings(
            storage={"data_dir": Path(tmp)},
            llm={"base_url": fake.url, "chat_model": "chat-model", "monitor_model": "monitor-model"},
            rate_limit_per_minute=0,
        )
        clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
        app = await build_app(settings, clock=clock, embedder=RandomUnitEmbedder(), background=False)
        try:
            alice, bob = Scope("xiaoxiang", "cli:alice"), Scope("xiaoxiang", "cli:bob")
            others = [Scope("xiaoxiang", f"cli:other{index}") for index in range(args.others)]
            started = time.perf_counter()
            fill(app, alice, args.messages, args.memories, clock.now())
            fill(app, bob, args.messages, args.memories, clock.now())
            for scope in others:
                fill(app, scope, 200, 50, clock.now())
            filled = time.perf_counter() - started
            await chat_while(app, others, None, turns=1)  # warm up: first connections, first prompts
            baseline = await chat_while(app, others, None, turns=5)
            what_seconds, during_what = await timed_forget(
                app,
                others,
                app.companion.forgetting.forget(await app.companion.forgetting.find(bob, f"my code {CODE}")),
            )
            everything_seconds, during_everything = await timed_forget(
                app, others, app.companion.forgetting.everything(alice)
            )
            assert app.companion.knowledge.memories(alice) == [] and app.history.messages(alice) == []
            live = sum(app.companion.knowledge.count(scope) for scope in [bob, *others])
            compact_seconds, during_compact = await timed_forget(app, others, app.compact_vectors())
            return {
                "cpu": cpu_model(),
                "messages": args.messages,
                "memories": args.memories,
                "fill_seconds": round(filled, 1),
                "forget_everything_seconds": round(everything_seconds, 3),
                "forget_what_seconds": round(what_seconds, 3),
                "target_seconds": TARGET_SECONDS,
                "others_reply_ms_baseline": summarize(baseline),
                "others_reply_ms_during_forget_everything": summarize(during_everything),
                "others_replies_during_forget_everything": len(during_everything),
                "others_reply_ms_during_forget_what": summarize(during_what),
                "compaction_seconds": round(compact_seconds, 3),
                "memories_live_at_compaction": live,
                "others_reply_ms_during_compaction": summarize(during_compact),
            }
        finally:
            await app.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--memories", type=int, default=1_000)
    parser.add_argument("--others", type=int, default=5, help="other users chatting during the forget")
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()
    figures = asyncio.run(run(args))
    if not args.json:
        print(f"CPU: {figures['cpu']}")
        filled = figures["fill_seconds"]
        print(f"one user with {args.messages:,} messages and {args.memories:,} memories (filled in {filled} s)")
        print(f"/forget (everything): {figures['forget_everything_seconds']} s (target <= {TARGET_SECONDS} s)")
        print(f"/forget <what> (a code in {args.messages // CODE_EVERY} messages): {figures['forget_what_seconds']} s")
        print(f"other users' replies, ms, no forget running:   {figures['others_reply_ms_baseline']}")
        print(
            f"other users' replies, ms, during /forget:      {figures['others_reply_ms_during_forget_everything']}"
            f" ({figures['others_replies_during_forget_everything']} replies)"
        )
        print(f"other users' replies, ms, during /forget <what>: {figures['others_reply_ms_during_forget_what']}")
        print(
            f"vector index rebuilt without the deleted vectors ({figures['memories_live_at_compaction']:,} memories "
            f"live): {figures['compaction_seconds']} s; other users' replies meanwhile, ms: "
            f"{figures['others_reply_ms_during_compaction']}"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
