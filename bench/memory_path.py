"""Benchmark of the memory path of one chat turn: the product's own turn, timed from the outside.

What is measured, per store size (default 1,000 and 10,000 memories, all in ONE scope):

* a fresh data directory (``tempfile.TemporaryDirectory``) and an app built by ``bot.app.build_app``
  with the real embedder, embedded chromadb and SQLite working memory; the LLM is the real
  ``OpenAIClient`` talking real HTTP to ``tests.fakes.openai_server.FakeOpenAIServer``, which
  answers at once;
* the scope is seeded with N ``fact`` memories, mixed English / Chinese / code-mixed, generated
  from ``bench.templates`` with a seeded ``random.Random`` (same texts, ids, importances and ages
  on every run);
* every turn is ``Companion.handle()`` with a different template-generated query, plus consuming
  the streamed reply (which stores it and hands the turn to the background): exactly what an
  adapter does. Nothing of the pipeline is called directly. Two boundaries are wrapped to time their
  share: the LLM client (request to last chunk of the stream) and the embedder (every query
  embedding of the turn: memories and past messages share one). "memory path" = turn - LLM:
  storing both messages, retrieval of memories and of past messages, ranking, the prompt.

Time (docs/development/design-rules.md#time): some queries name a time ("yesterday", "上周"), which the turn
turns into a window of the user's local time. ``time_parsing`` is that step alone, timed by calling
the function the turn calls (``find_window``) on each turn's text; ``now_tokens`` is what the
prompt's "## Now" section costs and ``date_tokens`` what the dates on its memory lines cost, counted
in the turn's own prompt.

After ``--warmup`` untimed turns, ``--turns`` turns are timed. The background work a turn starts
(the monitor, which also indexes the turn's messages for the past-message search, and summaries)
is drained, untimed, before the next turn: ``bench.background`` measures what it costs the reply.

CPU per turn, background included (``bench.cpu_account``): thread CPU time by component (query
embedding, passage embeddings, search, prompt, SQLite, chromadb, event loop, other threads), from
the turn's start until its background work is drained. The fake LLM's thread is among "other threads".

Figures are p50 / p95 / mean / max in milliseconds. The fake answers a short fixed reply with no
delay, so the LLM figure is the HTTP + SSE + client overhead only. Nothing is cached across runs:
every size gets its own new store, seeded from scratch (10k memories take ~2 minutes, embedding
bound); only the embedding model itself is loaded once per process.

``--backends embedded,server`` runs every size on both backends in one run and prints their ratio:
server mode is PostgreSQL (started by the bench, as the tests do) and a Chroma server (``chroma
run``); there the database's share of a turn is counted too: statements per turn and their time,
from the client's side (the ``PostgresDatabase`` boundary, wrapped).

Run from the repository root::

    python -m bench.memory_path                      # sizes 1000,10000; 200 timed turns
    python -m bench.memory_path --sizes 1000 --backends embedded,server   # server mode against embedded
    python -m bench.memory_path --sizes 1000 --turns 50
    python -m bench.memory_path --json               # plus one JSON line with every figure
    python -m bench.memory_path --warmup 20          # untimed turns first (default 20)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import random
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.cpu_account import CPUAccount, per_turn_ms, print_account
from bench.stats import cpu_model, summarize
from bench.templates import slots
from bot.app import App, build_app, build_llm
from bot.config import MemorySettings, Settings
from core.llm.client import LLMClient, ModelSettings, count_tokens
from core.types import ChatMessage, ConversationRef, IncomingMessage, Role, ToolCall, Tools, UserRef
from knowledge.dates.windows import find_window
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.records import MemoryRecord, Scope
from knowledge.search.embedding import Embedder, load_embedder
from personas.loader import ModelChoice
from tests.fakes.openai_server import FakeOpenAIServer

SEED = 20240611
FAKE_MODEL = "fake-model"
FAKE_MONITOR = "fake-monitor"  # the background monitor: [SKIP], so no memory is added while timing
FAKE_REPLY = "好呀～主人今天也辛苦了！I remember that, tell me more?"
USER_ID = "cli:bench-user"
SPEAKER = "Alice"
CONVERSATION = "cli:bench-handle"
SEED_BATCH = 256  # passages embedded and added to chromadb per call
RETRIEVED_HEADER = "## What you remember that may matter now"

Samples = dict[str, list[float]]
Summary = dict[str, dict[str, float]]


# --- deterministic content ----------------------------------------------------------------------

FACT_TEMPLATES: list[str] = [
    # English
    "{user}'s {relation_en} {name_en} lives in {city_en} and works as a {job_en}.",
    "{user} loves {food_en} but can't stand {food_en2}.",
    "{user} has been {hobby_en} every {weekday_en} since {year}.",
    "{user} works as a {job_en} and usually finishes work around {hour} pm.",
    "{user} has {pet_en}; it turns {n} this {month_en}.",
    "{user} is allergic to {allergen_en} and always checks menus when eating out.",
    "{user} visited {city_en} in {month_en} {year} and wants to go back for the {food_en}.",
    "{user} is preparing for the {exam_en} exam in {month_en}.",
    "{user}'s {relation_en} {name_en} has a birthday on {month_en} {day}.",
    "{user} saw {band} live in {city_en} and still talks about it.",
    "{user} drinks {drink_en} every morning and never skips breakfast.",
    "{user} usually goes to bed after {late} and struggles to wake up on {weekday_en}s.",
    "{user} met {name_en} at a {hobby_en} class in {city_en}.",
    "{user} was stressed about a deadline on {weekday_en} and calmed down by {hobby_en}.",
    # Chinese
    "主人的{relation_zh}{name_zh}住在{city_zh}，是一名{job_zh}。",
    "主人最爱吃{food_zh}，但是完全不吃{food_zh2}。",
    "主人从{year}年开始{hobby_zh}，每个{weekday_zh}都会练习。",
    "主人在{city_zh}当{job_zh}，平时{hour}点左右下班。",
    "主人养了{pet_zh}，今年{n}岁了。",
    "主人对{allergen_zh}过敏，出去吃饭要特别注意。",
    "主人{year}年{month_n}月去过{city_zh}，很想再去吃一次{food_zh}。",
    "主人打算{month_n}月参加{exam_zh}，最近在认真复习。",
    "主人的{relation_zh}{name_zh}生日是{month_n}月{day}日。",
    "主人每天早上都要喝{drink_zh}，不然一整天都没精神。",
    "主人一般{late_zh}才睡觉，{weekday_zh}早上总是起不来。",
    "主人是在{city_zh}的{hobby_zh}班上认识{name_zh}的。",
    "主人{weekday_zh}因为项目截止压力很大，后来靠{hobby_zh}放松下来。",
    "主人最近单曲循环{band}的歌，还想去{city_zh}看演唱会。",
    "主人上个月买了一辆{color_zh}的自行车，周末会骑去{place_zh}。",
    # code-mixed
    "主人的 manager {name_en} 很严格，每周{weekday_zh}都要开 weekly meeting。",
    "{user} 说她最想去{city_zh}吃{food_zh}, maybe in {month_en}.",
]

QUERY_TEMPLATES: list[str] = [
    "Do you remember where my {relation_en} lives?",
    "I'm thinking about making {food_en} tonight, good idea?",
    "I'm flying to {city_en} next {weekday_en}, any tips?",
    "Rough day at work again... being a {job_en} is exhausting.",
    "Guess what, I finally started {hobby_en} again!",
    "When is {name_en}'s birthday again?",
    "I can't sleep, it's already {late}.",
    "Should I sign up for the {exam_en} exam this {month_en}?",
    "你还记得我{relation_zh}住在哪里吗？",
    "今晚想吃{food_zh}，你觉得怎么样？",
    "我下个{weekday_zh}要去{city_zh}出差，好紧张",
    "今天{hobby_zh}的时候碰到了{name_zh}！",
    "{name_zh}的生日是哪天来着？",
    "好累啊，已经{late_zh}了还在加班",
    "我对{allergen_zh}过敏这件事你还记得吗？",
    "今天的 meeting 好长，{name_en} 又在挑刺",
    "周末想去{city_zh}玩, any ideas for food?",
    # naming a time: the window of the user's local time the turn recalls from
    "What did we talk about yesterday?",
    "Remember what I said last week about {food_en}?",
    "Two days ago I met {name_en} again.",
    "我们上次聊了什么来着？",
    "三天前我说的{food_zh}你还记得吗？",
    "上周{weekday_zh}我去了{city_zh}",
]


def unique_texts(templates: Sequence[str], count: int, rng: random.Random) -> list[str]:
    """`count` distinct texts from `templates`, deterministic for a given `rng` state."""
    texts: dict[str, None] = {}
    attempts = 0
    while len(texts) < count:
        attempts += 1
        if attempts > count * 50:
            raise RuntimeError(f"templates cannot produce {count} distinct texts")
        texts[rng.choice(templates).format(**slots(rng, SPEAKER))] = None
    return list(texts)


# --- timing wrappers: the boundaries of the turn, not its steps ---------------------------------


def _ms_since(start: int) -> float:
    return (time.perf_counter_ns() - start) / 1e6


class TimedEmbedder:
    """The real embedder, adding up how long query embeddings took since the last `reset`."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.query_ms = 0.0

    def reset(self) -> None:
        self.query_ms = 0.0

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        start = time.perf_counter_ns()
        vectors = self._inner.embed_queries(texts)
        self.query_ms += _ms_since(start)
        return vectors

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._inner.embed_passages(texts)


class TimedLLM:
    """The real LLM client, remembering the last chat prompt and how long its stream took (request to last chunk)."""

    def __init__(self, inner: LLMClient) -> None:
        self._inner = inner
        self.last_stream_ms = 0.0
        self.last_prompt: list[ChatMessage] = []

    def settings(self, role: Role) -> ModelSettings:
        return self._inner.settings(role)

    async def complete(self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None) -> str:
        return await self._inner.complete(messages, role=role, choice=choice)

    async def stream(
        self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None, tools: Tools = ()
    ) -> AsyncIterator[str | ToolCall]:
        self.last_prompt = list(messages)
        start = time.perf_counter_ns()
        async for piece in self._inner.stream(messages, role=role, choice=choice, tools=tools):
            yield piece
        self.last_stream_ms = _ms_since(start)

    async def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            await close()


# --- the benchmark -------------------------------------------------------------------------------


@dataclass
class Bench:
    """One app over one seeded store, with its LLM and embedder wrapped."""

    app: App
    scope: Scope
    knowledge: ChromaKnowledgeBase
    llm: TimedLLM
    embedder: TimedEmbedder
    account: CPUAccount


class Servers:
    """Server mode's PostgreSQL and Chroma server, started once for every size; a fresh database per size."""

    def __init__(self, root: Path) -> None:
        from tests.servers import ChromaServer, PostgresServer

        self.postgres = PostgresServer().start()
        self.chroma = ChromaServer(root / "chroma-server").start()
        self._databases = 0

    def settings(self) -> dict[str, Any]:
        """Storage settings of a fresh, empty store: a new database, the Chroma server without memories."""
        import chromadb
        from pydantic import SecretStr

        self._databases += 1
        url = self.postgres.create_database(f"bench_{self._databases}")
        client = chromadb.HttpClient(host="127.0.0.1", port=self.chroma.port)
        if "memories" in {getattr(found, "name", found) for found in client.list_collections()}:
            client.delete_collection("memories")
        return {"database_url": SecretStr(url), "chroma_host": "127.0.0.1", "chroma_port": self.chroma.port}

    def stop(self) -> None:
        self.chroma.stop()
        self.postgres.stop()


class StatementCounter:
    """Counts and times the statements the app sends to PostgreSQL, at the `PostgresDatabase` boundary."""

    def __init__(self) -> None:
        self.statements = 0
        self.seconds = 0.0

    def install(self) -> None:
        from knowledge.sql import postgres

        counter = self
        query, execute, executemany = (
            postgres.PostgresDatabase.query,
            postgres._Transaction.execute,
            postgres._Transaction.executemany,
        )

        def timed(method: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return method(*args, **kwargs)
                finally:
                    counter.statements += 1
                    counter.seconds += time.perf_counter() - started

            return wrapper

        postgres.PostgresDatabase.query = timed(query)  # type: ignore[method-assign]
        postgres._Transaction.execute = timed(execute)  # type: ignore[method-assign]
        postgres._Transaction.executemany = timed(executemany)  # type: ignore[method-assign]

    def reset(self) -> None:
        self.statements, self.seconds = 0, 0.0


STATEMENTS = StatementCounter()


async def open_bench(
    data_dir: Path, fake_url: str, embedder: TimedEmbedder, account: CPUAccount, servers: Servers | None = None
) -> Bench:
    # No rate limit: the bench sends hundreds of turns a minute from one user.
    settings = Settings(
        storage={"data_dir": data_dir, **(servers.settings() if servers is not None else {})},
        llm={"base_url": fake_url, "chat_model": FAKE_MODEL, "monitor_model": FAKE_MONITOR},
        rate_limit_per_minute=0,
    )
    llm = TimedLLM(build_llm(settings.llm))  # the OpenAIClient build_app would make, wrapped to be timed
    app = await build_app(settings, llm=llm, embedder=embedder)
    knowledge = app.companion.knowledge
    assert isinstance(knowledge, ChromaKnowledgeBase)
    return Bench(
        app=app,
        scope=Scope(app.companion.persona().id, USER_ID),
        knowledge=knowledge,
        llm=llm,
        embedder=embedder,
        account=account,
    )


def seed_facts(bench: Bench, texts: Sequence[str], rng: random.Random) -> None:
    """Store `texts` as facts of the bench scope through the store's batch import (one embedding call per batch)."""
    now = datetime.now(UTC)
    for start in range(0, len(texts), SEED_BATCH):
        batch = texts[start : start + SEED_BATCH]
        records = [_fact_record(bench.scope, start + offset, text, now, rng) for offset, text in enumerate(batch)]
        bench.knowledge.add_records(records)
        print(f"  seeded {start + len(batch):>6,} / {len(texts):,}", end="\r", file=sys.stderr, flush=True)
    print(file=sys.stderr)


def _fact_record(scope: Scope, index: int, text: str, now: datetime, rng: random.Random) -> MemoryRecord:
    created = now - timedelta(days=rng.uniform(0, 180))
    return MemoryRecord(
        id=f"mem_bench{index:07d}",
        scope=scope,
        content=text,
        category="fact",
        importance=round(rng.uniform(0.5, 2.9), 2),
        created_at=created,
        last_access=created + (now - created) * rng.random(),
        source=rng.choice(["user", "background_ai"]),
        verified=rng.random() < 0.3,
        conversation_id="cli:bench-history",
    )


async def handle_turn(bench: Bench, text: str) -> dict[str, float]:
    """One turn as an adapter makes it: Companion.handle() and the consumed stream (which stores the reply)."""
    message = IncomingMessage(
        conversation=ConversationRef.parse(CONVERSATION),
        user=UserRef.parse(USER_ID),
        speaker_name=SPEAKER,
        text=text,
        sent_at=datetime.now(UTC),
    )
    bench.embedder.reset()
    STATEMENTS.reset()
    start = time.perf_counter_ns()
    result = await bench.app.companion.handle(message)
    reply = await result.text()
    total = _ms_since(start)
    statements, database_ms = STATEMENTS.statements, STATEMENTS.seconds * 1000
    if not result.completed or not reply or result.stored is None:
        raise RuntimeError(f"the turn did not complete: {result.notice}")
    llm = bench.llm.last_stream_ms
    now_tokens, date_tokens = time_tokens(bench.llm.last_prompt)
    return {
        "turn": total,
        "llm": llm,
        "memory_path": total - llm,
        "query_embedding": bench.embedder.query_ms,
        "time_parsing": time_parsing_ms(bench, message),
        "database": database_ms,
        "statements": statements,
        "memories_in_prompt": memories_in_prompt(bench.llm.last_prompt),
        "now_tokens": now_tokens,
        "date_tokens": date_tokens,
    }


def time_parsing_ms(bench: Bench, message: IncomingMessage) -> float:
    """The turn's time parsing: the window its text names, in the user's zone, as the reply path reads it."""
    zone = bench.app.companion.user_settings.time_zone(bench.scope)
    start = time.perf_counter_ns()
    find_window(message.text, message.sent_at.astimezone(zone))
    return _ms_since(start)


_DATE_TAG = re.compile(r"^- \[[^\]]*\] ", re.MULTILINE)


def time_tokens(prompt: Sequence[ChatMessage]) -> tuple[float, float]:
    """Tokens of the prompt's "## Now" section, and of the dates its memory lines carry ("[3 Jan] ")."""
    system = prompt[0].content
    now = system.split("## Now\n", 1)[1].split("\n\n", 1)[0] if "## Now\n" in system else ""
    memories = system.split("## What you remember", 1)[1] if "## What you remember" in system else ""
    memories = memories.split("## Earlier messages", 1)[0]  # quoted messages were dated before
    dates = sum(count_tokens(match[0]) - count_tokens("- ") for match in _DATE_TAG.finditer(memories))
    return (count_tokens("\n\n## Now\n" + now) if now else 0), dates


def memories_in_prompt(prompt: Sequence[ChatMessage]) -> float:
    """How many retrieved facts and episodes the chat prompt carried."""
    system = prompt[0].content
    if RETRIEVED_HEADER not in system:
        return 0
    section = system.split(RETRIEVED_HEADER, 1)[1].split("\n\n", 1)[0]
    return sum(1 for line in section.splitlines() if line.startswith("- "))


async def run_turns(bench: Bench, queries: Sequence[str], warmup: int) -> tuple[Samples, Samples]:
    """One turn per query; the first `warmup` are not recorded. The background is drained after each, untimed.

    Returns the timings and the CPU account of each turn, background included."""
    samples: Samples = defaultdict(list)
    cpu: Samples = defaultdict(list)
    for index, query in enumerate(queries):
        before = bench.account.snapshot()
        figures = await handle_turn(bench, query)
        await bench.app.companion.tasks.drain()
        spent = per_turn_ms(before, bench.account.snapshot(), 1)
        if index < warmup:
            continue
        for stage, value in figures.items():
            samples[stage].append(value)
        for component, value in spent.items():
            cpu[component].append(value)
    return samples, cpu


def wait_until_idle(limit: float = 120.0) -> None:
    """Let chromadb finish indexing what was just seeded (it works in background threads), so its
    catch-up work is not timed as part of the turns."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = time.process_time()
        time.sleep(1.0)
        if time.process_time() - before < 0.05:
            return
    print("warning: the process never went idle after seeding", file=sys.stderr)


def check_persisted(bench: Bench, turns: int) -> None:
    """Every turn stored a user message and a reply, and every prompt carried retrieved memories."""
    stored = bench.app.working_memory.log.count(bench.scope)
    if stored != 2 * turns:
        raise RuntimeError(f"expected {2 * turns} stored messages, found {stored}")
    last = bench.app.working_memory.window(bench.scope.persona_id, CONVERSATION)[-1]
    if last.role != "assistant" or last.content != FAKE_REPLY:
        raise RuntimeError("the last reply was not persisted")


async def bench_size(
    size: int,
    args: argparse.Namespace,
    embedder: TimedEmbedder,
    account: CPUAccount,
    fake_url: str,
    servers: Servers | None = None,
) -> dict[str, Any]:
    rng = random.Random(SEED)
    facts = unique_texts(FACT_TEMPLATES, size, rng)
    queries = unique_texts(QUERY_TEMPLATES, args.warmup + args.turns, random.Random(SEED + 1))
    backend = "embedded" if servers is None else "server"
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        bench = await open_bench(Path(tmp), fake_url, embedder, account, servers)
        try:
            print(f"[{size:,} memories, {backend}] seeding...", file=sys.stderr)
            start = time.perf_counter()
            seed_facts(bench, facts, rng)
            seed_seconds = time.perf_counter() - start
            if bench.knowledge.count(bench.scope) != size:
                raise RuntimeError("the store does not hold the seeded memories")
            wait_until_idle()
            print(f"[{size:,} memories] {args.warmup} warm-up + {args.turns} timed turns...", file=sys.stderr)
            start = time.perf_counter()
            samples, cpu = await run_turns(bench, queries, args.warmup)
            turns_seconds = time.perf_counter() - start
            check_persisted(bench, args.warmup + args.turns)
            if min(samples["memories_in_prompt"]) < 1:
                raise RuntimeError("a prompt carried no retrieved memory")
        finally:
            await bench.app.aclose()
    return {
        "memories": size,
        "backend": backend,
        "seed_s": round(seed_seconds, 2),
        "turns_s": round(turns_seconds, 2),
        "handle": {stage: summarize(values, digits=3) for stage, values in samples.items()},
        "cpu_ms_per_turn": {component: summarize(values) for component, values in cpu.items()},
    }


# --- report --------------------------------------------------------------------------------------

ROWS: list[tuple[str, str]] = [
    ("turn", "TURN: handle() + consumed stream"),
    ("llm", "  LLM stream, fake HTTP"),
    ("memory_path", "MEMORY PATH = turn - LLM"),
    ("query_embedding", "  of which query embedding"),
    ("database", "  of which PostgreSQL statements"),
    ("statements", "PostgreSQL statements per turn"),
    ("time_parsing", "TIME PARSING (find_window)"),
    ("memories_in_prompt", "retrieved memories in the prompt"),
    ("now_tokens", 'tokens of the "## Now" section'),
    ("date_tokens", "tokens of the memories' dates"),
]


def print_table(results: Sequence[dict[str, Any]]) -> None:
    label_width = 34
    header = f"{'ms':<{label_width}}" + "".join(
        f" | {r['memories']:>6,} {r['backend'][:6]:>6}: p50    p95   mean" for r in results
    )
    print(header)
    print("-" * len(header))
    for stage, label in ROWS:
        figures = [r["handle"][stage] for r in results]
        cells = "".join(f" | {'':>12}{f['p50']:6.2f} {f['p95']:6.2f} {f['mean']:6.2f}" for f in figures)
        print(f"{label:<{label_width}}{cells}")
    print("-" * len(header))
    for r in results:
        print(
            f"{r['memories']:,} memories, {r['backend']}: seeded in {r['seed_s']:.1f} s, "
            f"turns ran in {r['turns_s']:.1f} s"
        )
    for size in dict.fromkeys(r["memories"] for r in results):
        pair = {r["backend"]: r["handle"]["memory_path"] for r in results if r["memories"] == size}
        if len(pair) == 2:
            server, embedded = pair["server"], pair["embedded"]
            print(
                f"{size:,} memories: memory path server / embedded = {server['p50'] / embedded['p50']:.2f} (p50), "
                f"{server['p95'] / embedded['p95']:.2f} (p95)   target <= 2"
            )
    for r in results:
        title = f"CPU ms per turn, background included, {r['memories']:,} memories, {r['backend']}:"
        print_account(title, r["cpu_ms_per_turn"])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.memory_path", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="memories in the scope, comma-separated")
    parser.add_argument("--turns", type=int, default=200, help="timed turns per loop and size")
    parser.add_argument("--warmup", type=int, default=20, help="untimed turns before them")
    parser.add_argument("--json", action="store_true", help="print one JSON line with every figure at the end")
    parser.add_argument("--backends", default="embedded", help="embedded, server, or both: embedded,server")
    args = parser.parse_args(argv)
    args.backends = [backend.strip() for backend in args.backends.split(",") if backend.strip()]
    if not set(args.backends) <= {"embedded", "server"} or not args.backends:
        parser.error("--backends takes embedded and/or server")
    args.sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    if not args.sizes or min(args.sizes) < 1 or args.turns < 1 or args.warmup < 0:
        parser.error("sizes and turns must be positive, warmup not negative")
    return args


async def run(
    args: argparse.Namespace, embedder: TimedEmbedder, account: CPUAccount, fake_url: str
) -> list[dict[str, Any]]:
    if "server" not in args.backends:
        return [await bench_size(size, args, embedder, account, fake_url) for size in args.sizes]
    STATEMENTS.install()
    with tempfile.TemporaryDirectory(prefix="bench-servers-") as root:
        servers = Servers(Path(root))
        try:
            return [
                await bench_size(size, args, embedder, account, fake_url, servers if backend == "server" else None)
                for size in args.sizes
                for backend in args.backends
            ]
        finally:
            servers.stop()


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    inner = load_embedder(MemorySettings.model_fields["embedder"].default)
    embedder = TimedEmbedder(inner)
    account = CPUAccount(inner.cpu)
    with FakeOpenAIServer() as fake, account.instrumented():
        fake.set_default(FAKE_MODEL, FAKE_REPLY)
        fake.set_default(FAKE_MONITOR, "[SKIP]")
        results = asyncio.run(run(args, embedder, account, fake.url))
    runtime = time.perf_counter() - started
    print(
        f"memory path of one turn; embedder {embedder.name}; {args.turns} timed turns after {args.warmup} warm-up; "
        f"CPU {cpu_model()}; load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}"
    )
    print_table(results)
    print(f"total runtime {runtime:.1f} s")
    if args.json:
        report = {
            "benchmark": "memory_path",
            "unit": "ms",
            "embedder": embedder.name,
            "turns": args.turns,
            "warmup": args.warmup,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpu": cpu_model(),
            "load_average": os.getloadavg(),
            "runtime_s": round(runtime, 1),
            "results": results,
        }
        print(json.dumps(report, ensure_ascii=False))


if __name__ == "__main__":
    main()
