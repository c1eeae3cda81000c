"""Benchmark of the memory path of one chat turn: retrieve, inject, persist.

What is measured, per store size (default 1,000 and 10,000 memories, all in ONE scope):

* a fresh data directory (``tempfile.TemporaryDirectory``) and an app built by ``bot.app.build_app``
  with the real embedder, embedded chromadb and SQLite working memory; the LLM is the real
  ``OpenAIClient`` talking real HTTP to ``tests.fakes.openai_server.FakeOpenAIServer``, which
  answers at once;
* the scope is seeded with N ``fact`` memories, mixed English / Chinese / code-mixed, generated
  from templates with a seeded ``random.Random`` (same texts, ids, importances and ages on every run);
* every turn uses a different template-generated query. After ``--warmup`` untimed turns,
  ``--turns`` turns are timed twice over, interleaved:

  1. **components** -- the steps of ``ResponseHandler.reply`` called one by one, each timed
     (``working_memory.append`` of the user message, ``knowledge.list`` of core memories and
     ``knowledge.search`` -- query embedding included -- each through ``asyncio.to_thread`` as
     the handler does, ranking, the window read, ``MemoryInjector.build``, the streamed LLM call,
     ``working_memory.append`` of the reply). "memory path" = that turn's wall time minus its LLM call.
  2. **handle** -- ``Companion.handle()`` plus consuming the streamed reply (which is what
     persists the assistant message): the real turn including the fake LLM's HTTP round trip.
     The LLM client is wrapped to time its stream, so "memory path" is also given as turn minus LLM.

Figures are p50 / p95 / mean in milliseconds. The fake answers a short fixed reply with no delay, so
the LLM figure is the HTTP + SSE + client overhead only. Nothing is cached across runs: every size
gets its own new store, seeded from scratch (10k memories take ~2 minutes, embedding bound); only
the embedding model itself is loaded once per process.

Run from the repository root::

    python -m bench.memory_path                      # sizes 1000,10000; 200 timed turns
    python -m bench.memory_path --sizes 1000 --turns 50
    python -m bench.memory_path --json               # plus one JSON line with every figure
    python -m bench.memory_path --warmup 20          # untimed turns first (default 20)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from bot.app import App, build_app, build_llm
from bot.config import Settings
from core.llm import LLMClient, ModelSettings
from core.memory_injector import Budget, MemoryInjector
from core.response_handler import MAX_QUERY_CHARS
from core.system_memories import system_records
from core.types import ChatMessage, IncomingMessage, Role
from knowledge.embedding import Embedder, load_embedder
from knowledge.message_log import MessageRole
from knowledge.ranking import rank_for_prompt
from knowledge.records import MemoryRecord, Scope
from knowledge.store import ChromaKnowledgeBase
from personas.loader import ModelChoice, Persona
from tests.fakes.openai_server import FakeOpenAIServer

SEED = 20240611
FAKE_MODEL = "fake-model"
FAKE_REPLY = "好呀～主人今天也辛苦了！I remember that, tell me more?"
USER_ID = "cli:bench-user"
SPEAKER = "Alice"
SEED_BATCH = 256  # passages embedded and added to chromadb per call

Samples = dict[str, list[float]]
Summary = dict[str, dict[str, float]]
T = TypeVar("T")


# --- deterministic content ----------------------------------------------------------------------

_POOLS: dict[str, list[str]] = {
    "name_en": ["Emma", "Liam", "Olivia", "Noah", "Sophia", "Lucas", "Mia", "Ethan", "Chloe", "Daniel", "Grace"],
    "name_zh": ["小雨", "阿杰", "丽丽", "王磊", "陈晨", "刘洋", "张伟", "思琪", "浩然", "雅婷", "子涵", "一鸣"],
    "city_en": ["Shanghai", "Berlin", "Toronto", "Osaka", "Lisbon", "Melbourne", "Chengdu", "Seattle", "Hangzhou"],
    "city_zh": ["上海", "北京", "成都", "杭州", "深圳", "广州", "南京", "西安", "重庆", "苏州", "厦门", "武汉"],
    "relation_en": ["sister", "brother", "mother", "father", "best friend", "roommate", "manager", "cousin"],
    "relation_zh": ["妹妹", "哥哥", "妈妈", "爸爸", "好朋友", "室友", "领导", "表姐", "奶奶", "同事"],
    "food_en": ["ramen", "tiramisu", "spicy hotpot", "sushi", "dumplings", "pad thai", "croissants", "cheesecake"],
    "food_zh": ["火锅", "小笼包", "麻辣烫", "草莓蛋糕", "牛肉面", "煎饼果子", "烤鸭", "酸菜鱼", "螺蛳粉"],
    "hobby_en": ["rock climbing", "watercolor painting", "playing the guitar", "baking sourdough", "photography",
                 "long-distance running", "chess", "knitting", "learning Japanese", "gardening"],
    "hobby_zh": ["弹钢琴", "打羽毛球", "画水彩", "拍照", "夜跑", "做手账", "拼乐高", "学日语", "养多肉", "写毛笔字"],
    "job_en": ["nurse", "software engineer", "graphic designer", "high-school teacher", "accountant", "barista",
               "PhD student", "product manager", "architect", "translator"],
    "job_zh": ["护士", "程序员", "设计师", "老师", "会计", "研究生", "产品经理", "建筑师", "翻译", "销售"],
    "pet_en": ["a ginger cat named Mochi", "a corgi named Biscuit", "two goldfish", "a parrot called Kiwi",
               "a rescue greyhound named Luna", "a hamster called Peanut"],
    "pet_zh": ["一只叫团子的橘猫", "一只叫豆豆的柯基", "两条金鱼", "一只叫咪咪的布偶猫", "一只仓鼠", "一只叫旺财的柴犬"],
    "allergen_en": ["peanuts", "shellfish", "cat hair", "pollen", "penicillin", "lactose"],
    "allergen_zh": ["花生", "海鲜", "猫毛", "花粉", "芒果", "牛奶"],
    "drink_en": ["black coffee", "oat latte", "green tea", "a fruit smoothie", "hot chocolate"],
    "drink_zh": ["美式咖啡", "豆浆", "绿茶", "奶茶", "蜂蜜水"],
    "exam_en": ["IELTS", "driving", "CPA", "GRE", "JLPT N2", "piano grade 8"],
    "exam_zh": ["雅思", "驾照科目二", "考研", "教师资格证", "日语N2", "注册会计师"],
    "band": ["Coldplay", "五月天", "Radiohead", "周杰伦", "Taylor Swift", "陈奕迅", "Arctic Monkeys", "告五人"],
    "weekday_en": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "weekday_zh": ["周一", "周二", "周三", "周四", "周五", "周六", "周日"],
    "month_en": ["January", "February", "March", "April", "May", "June", "July", "August", "September",
                 "October", "November", "December"],
    "color_zh": ["白色", "黑色", "墨绿色", "浅蓝色", "红色"],
    "place_zh": ["西湖", "江边", "植物园", "老城区", "海边", "森林公园"],
}

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
]


def _slots(rng: random.Random) -> dict[str, str]:
    """One random value for every template slot."""
    slots = {key: rng.choice(values) for key, values in _POOLS.items()}
    slots["food_en2"] = rng.choice([food for food in _POOLS["food_en"] if food != slots["food_en"]])
    slots["food_zh2"] = rng.choice([food for food in _POOLS["food_zh"] if food != slots["food_zh"]])
    slots.update(
        user=SPEAKER,
        year=str(rng.randint(2012, 2024)),
        hour=str(rng.randint(5, 9)),
        n=str(rng.randint(1, 14)),
        day=str(rng.randint(1, 28)),
        month_n=str(rng.randint(1, 12)),
        late=rng.choice(["midnight", "1 am", "2 am", "half past one"]),
        late_zh=rng.choice(["十二点", "凌晨一点", "凌晨两点", "一点半"]),
    )
    return slots


def unique_texts(templates: Sequence[str], count: int, rng: random.Random) -> list[str]:
    """`count` distinct texts from `templates`, deterministic for a given `rng` state."""
    texts: dict[str, None] = {}
    attempts = 0
    while len(texts) < count:
        attempts += 1
        if attempts > count * 50:
            raise RuntimeError(f"templates cannot produce {count} distinct texts")
        texts[rng.choice(templates).format(**_slots(rng))] = None
    return list(texts)


# --- timing wrappers -----------------------------------------------------------------------------


def _ms_since(start: int) -> float:
    return (time.perf_counter_ns() - start) / 1e6


class TimedEmbedder:
    """The real embedder, remembering how long the last query embedding took."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.last_query_ms = 0.0

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        start = time.perf_counter_ns()
        vectors = self._inner.embed_queries(texts)
        self.last_query_ms = _ms_since(start)
        return vectors

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._inner.embed_passages(texts)


class TimedLLM:
    """The real LLM client, remembering how long the last streamed reply took (request to last chunk)."""

    def __init__(self, inner: LLMClient) -> None:
        self._inner = inner
        self.last_stream_ms = 0.0

    def settings(self, role: Role) -> ModelSettings:
        return self._inner.settings(role)

    async def complete(
        self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None
    ) -> str:
        return await self._inner.complete(messages, role=role, choice=choice)

    async def stream(
        self, messages: Sequence[ChatMessage], *, role: Role, choice: ModelChoice | None = None
    ) -> AsyncIterator[str]:
        start = time.perf_counter_ns()
        async for piece in self._inner.stream(messages, role=role, choice=choice):
            yield piece
        self.last_stream_ms = _ms_since(start)

    async def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            await close()


async def _timed(samples: dict[str, float], stage: str, call: Awaitable[T]) -> T:
    start = time.perf_counter_ns()
    value = await call
    samples[stage] = _ms_since(start)
    return value


# --- the benchmark -------------------------------------------------------------------------------


@dataclass
class Bench:
    """One app over one seeded store, and the pieces the component loop calls directly."""

    app: App
    persona: Persona
    scope: Scope
    knowledge: ChromaKnowledgeBase
    injector: MemoryInjector
    llm: TimedLLM
    embedder: TimedEmbedder
    retrieval_limit: int
    retrieved_counts: list[int] = field(default_factory=list)


def open_bench(data_dir: Path, fake_url: str, embedder: TimedEmbedder) -> Bench:
    # No rate limit: the bench sends hundreds of turns a minute from one user.
    settings = Settings(data_dir=data_dir, openai_base_url=fake_url, chat_model=FAKE_MODEL, rate_limit_per_minute=0)
    llm = TimedLLM(build_llm(settings))  # the OpenAIClient build_app would make, wrapped to be timed
    app = build_app(settings, llm=llm, embedder=embedder)
    persona = app.companion.persona()
    knowledge = app.companion.knowledge
    assert isinstance(knowledge, ChromaKnowledgeBase)
    chat = llm.settings("chat")
    return Bench(
        app=app,
        persona=persona,
        scope=Scope(persona.id, USER_ID),
        knowledge=knowledge,
        injector=MemoryInjector(Budget(chat.context_window, chat.max_tokens)),  # as build_app makes it
        llm=llm,
        embedder=embedder,
        retrieval_limit=settings.retrieval_limit,
    )


def seed_facts(bench: Bench, texts: Sequence[str], rng: random.Random) -> None:
    """Store `texts` as facts of the bench scope through the store's batch import (one embedding call per batch)."""
    now = datetime.now(timezone.utc)
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


def _message(conversation_id: str, text: str) -> IncomingMessage:
    return IncomingMessage(
        conversation_id=conversation_id,
        user_id=USER_ID,
        speaker_name=SPEAKER,
        text=text,
        sent_at=datetime.now(timezone.utc),
    )


def _persist(bench: Bench, conversation: str, *, role: MessageRole, speaker: str, text: str, sent_at: datetime) -> None:
    bench.app.working_memory.append(
        bench.persona.id, conversation, role=role, user_id=USER_ID, speaker_name=speaker, content=text, sent_at=sent_at
    )


async def _recall(bench: Bench, text: str, t: dict[str, float]) -> tuple[list[MemoryRecord], list[MemoryRecord]]:
    """ResponseHandler._recall, step by step: two thread hops (core list, search), then ranking."""
    start = time.perf_counter_ns()
    core = await _timed(t, "list_core", asyncio.to_thread(bench.knowledge.list, bench.scope, categories=["core"]))
    search = asyncio.to_thread(
        bench.knowledge.search,
        bench.scope,
        text[:MAX_QUERY_CHARS],
        limit=bench.retrieval_limit,
        categories=["fact", "episode"],
    )
    hits = await _timed(t, "search", search)
    t["query_embedding"] = bench.embedder.last_query_ms
    always = system_records(bench.persona) + core
    retrieved = [hit.record for hit in rank_for_prompt(hits, bench.app.companion.clock.now())]
    t["retrieve"] = _ms_since(start)
    bench.retrieved_counts.append(len(retrieved))
    return always, retrieved


async def component_turn(bench: Bench, text: str) -> dict[str, float]:
    """ResponseHandler.reply's steps in its order, called directly and timed one by one."""
    t: dict[str, float] = {}
    conversation, now = "cli:bench-components", bench.app.companion.clock.now
    turn_start = time.perf_counter_ns()

    start = time.perf_counter_ns()
    _persist(bench, conversation, role="user", speaker=SPEAKER, text=text, sent_at=now())
    t["persist_user"] = _ms_since(start)

    always, retrieved = await _recall(bench, text, t)

    start = time.perf_counter_ns()
    window = bench.app.working_memory.window(bench.persona.id, conversation)
    t["window_read"] = _ms_since(start)

    start = time.perf_counter_ns()
    prompt = bench.injector.build(bench.persona, window=window, always=always, retrieved=retrieved, group=False)
    t["inject"] = _ms_since(start)

    reply = "".join([piece async for piece in bench.llm.stream(prompt.messages, role="chat")]).strip()
    t["llm"] = bench.llm.last_stream_ms

    start = time.perf_counter_ns()
    _persist(bench, conversation, role="assistant", speaker=bench.persona.name, text=reply, sent_at=now())
    t["persist_assistant"] = _ms_since(start)

    t["turn"] = _ms_since(turn_start)
    t["memory_path"] = t["turn"] - t["llm"]
    return t


async def handle_turn(bench: Bench, text: str) -> dict[str, float]:
    """The real turn: Companion.handle() and the consumed stream (which stores the reply)."""
    start = time.perf_counter_ns()
    result = await bench.app.companion.handle(_message("cli:bench-handle", text))
    reply = await result.text()
    total = _ms_since(start)
    if not result.completed or not reply:
        raise RuntimeError(f"the turn did not complete: {result.notice}")
    return {"turn": total, "llm": bench.llm.last_stream_ms, "memory_path": total - bench.llm.last_stream_ms}


def summarize(samples: Samples) -> Summary:
    """p50, p95 (linear interpolation) and mean of every stage, in ms."""
    return {
        stage: {
            "p50": round(float(np.percentile(values, 50)), 3),
            "p95": round(float(np.percentile(values, 95)), 3),
            "mean": round(float(np.mean(values)), 3),
        }
        for stage, values in samples.items()
    }


async def run_turns(bench: Bench, queries: Sequence[str], warmup: int) -> tuple[Samples, Samples]:
    """Alternate component and handle turns; the first `warmup` of each are not recorded.

    The background work a handled turn starts (monitor, summarizer) is drained, untimed, before the
    next turn: this bench measures the memory path itself; `bench.background` measures what the
    background costs the reply path.
    """
    components: Samples = defaultdict(list)
    handled: Samples = defaultdict(list)
    for index in range(len(queries) // 2):
        parts = await component_turn(bench, queries[2 * index])
        whole = await handle_turn(bench, queries[2 * index + 1])
        await bench.app.companion.tasks.drain()
        if index < warmup:
            continue
        for target, figures in ((components, parts), (handled, whole)):
            for stage, value in figures.items():
                target[stage].append(value)
    return components, handled


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
    """Every turn stored a user message and a reply, and retrieval returned full result sets."""
    stored = bench.app.working_memory.log.count(bench.scope)
    if stored != 4 * turns:
        raise RuntimeError(f"expected {4 * turns} stored messages, found {stored}")
    for conversation in ("cli:bench-components", "cli:bench-handle"):
        last = bench.app.working_memory.window(bench.persona.id, conversation)[-1]
        if last.role != "assistant" or last.content != FAKE_REPLY:
            raise RuntimeError(f"the last reply of {conversation} was not persisted")
    if min(bench.retrieved_counts) < bench.retrieval_limit:
        raise RuntimeError("a search returned fewer memories than the retrieval limit")


async def bench_size(size: int, args: argparse.Namespace, embedder: TimedEmbedder, fake_url: str) -> dict[str, Any]:
    rng = random.Random(SEED)
    facts = unique_texts(FACT_TEMPLATES, size, rng)
    queries = unique_texts(QUERY_TEMPLATES, 2 * (args.warmup + args.turns), random.Random(SEED + 1))
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        bench = open_bench(Path(tmp), fake_url, embedder)
        try:
            print(f"[{size:,} memories] seeding...", file=sys.stderr)
            start = time.perf_counter()
            seed_facts(bench, facts, rng)
            seed_seconds = time.perf_counter() - start
            if bench.knowledge.count(bench.scope) != size:
                raise RuntimeError("the store does not hold the seeded memories")
            wait_until_idle()
            print(f"[{size:,} memories] {args.warmup} warm-up + {args.turns} timed turns...", file=sys.stderr)
            start = time.perf_counter()
            components, handled = await run_turns(bench, queries, args.warmup)
            turns_seconds = time.perf_counter() - start
            check_persisted(bench, args.warmup + args.turns)
        finally:
            await bench.app.aclose()
    return {
        "memories": size,
        "seed_s": round(seed_seconds, 2),
        "turns_s": round(turns_seconds, 2),
        "components": summarize(components),
        "handle": summarize(handled),
    }


# --- report --------------------------------------------------------------------------------------

ROWS: list[tuple[str, str, str]] = [
    ("components", "persist_user", "persist user msg (append)"),
    ("components", "retrieve", "retrieve: list(core)+search+rank"),
    ("components", "list_core", "  knowledge.list(core)"),
    ("components", "search", "  knowledge.search"),
    ("components", "query_embedding", "    of which query embedding"),
    ("components", "window_read", "window read"),
    ("components", "inject", "inject (MemoryInjector.build)"),
    ("components", "persist_assistant", "persist reply (append)"),
    ("components", "memory_path", "MEMORY PATH = turn - LLM"),
    ("components", "llm", "LLM stream, fake HTTP"),
    ("components", "turn", "turn (components)"),
    ("handle", "turn", "TURN incl. fake LLM HTTP"),
    ("handle", "llm", "  LLM stream, fake HTTP"),
    ("handle", "memory_path", "MEMORY PATH = turn - LLM"),
]


def print_table(results: Sequence[dict[str, Any]]) -> None:
    label_width = 34
    header = f"{'ms':<{label_width}}" + "".join(f" | {r['memories']:>7,} mem: p50    p95   mean" for r in results)
    print(header)
    section = ""
    for loop, stage, label in ROWS:
        if loop != section:
            section = loop
            title = (
                "components: ResponseHandler steps called directly"
                if loop == "components"
                else "handle: Companion.handle() + consume stream"
            )
            print("-" * len(header))
            print(title)
        cells = "".join(
            f" | {'':>12}{r[loop][stage]['p50']:6.2f} {r[loop][stage]['p95']:6.2f} {r[loop][stage]['mean']:6.2f}"
            for r in results
        )
        print(f"{label:<{label_width}}{cells}")
    print("-" * len(header))
    for r in results:
        print(f"{r['memories']:,} memories: seeded in {r['seed_s']:.1f} s, turns ran in {r['turns_s']:.1f} s")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.memory_path", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="memories in the scope, comma-separated")
    parser.add_argument("--turns", type=int, default=200, help="timed turns per loop and size")
    parser.add_argument("--warmup", type=int, default=20, help="untimed turns before them")
    parser.add_argument("--json", action="store_true", help="print one JSON line with every figure at the end")
    args = parser.parse_args(argv)
    args.sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    if not args.sizes or min(args.sizes) < 1 or args.turns < 1 or args.warmup < 0:
        parser.error("sizes and turns must be positive, warmup not negative")
    return args


async def run(args: argparse.Namespace, embedder: TimedEmbedder, fake_url: str) -> list[dict[str, Any]]:
    return [await bench_size(size, args, embedder, fake_url) for size in args.sizes]


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    embedder = TimedEmbedder(load_embedder(Settings.model_fields["embedder"].default))
    with FakeOpenAIServer() as fake:
        fake.set_default(FAKE_MODEL, FAKE_REPLY)
        results = asyncio.run(run(args, embedder, fake.url))
    runtime = time.perf_counter() - started
    print(f"memory path of one turn; embedder {embedder.name}; {args.turns} timed turns after {args.warmup} warm-up")
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
            "runtime_s": round(runtime, 1),
            "results": results,
        }
        print(json.dumps(report, ensure_ascii=False))


if __name__ == "__main__":
    main()
