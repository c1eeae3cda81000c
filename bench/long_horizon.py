"""A simulated year with the companion: what memory keeps, what a prompt carries, what the background costs.

Users talk a few times a week for a year of fake-clock days; each conversation is about topics of its own
(a made-up word per topic, so a prompt either carries it or not). The daily pass runs as the scheduler runs
it (chapters due, decay, reviews). The models are the fake OpenAI server: an episode names the topics of its
conversation, a chapter the topics of what it folds, the way a real summarizer keeps what matters. At the end
each user asks about every month of the year ("what did we talk about in March?").

Figures: items stored at the end (by kind), memory tokens per chat prompt (what the system prompt's memory
sections hold), the share of a month's topics the prompt carries when asked about that month, and model
calls per week per user (chapters, episodes). The nightly consolidation pass at 100,000 memories, far more than a
simulated year of a few users holds, is measured by `bench.consolidation` (its CPU for a whole night, writes
included); this bench only points to it.

    .venv/bin/python -m bench.long_horizon [--users 2] [--per-week 3] [--weeks 52] [--json]

Embeddings are random unit vectors (`bench.decay.RandomUnitEmbedder`): a month named is found by its window,
not by meaning, and a year of real embeddings would take many minutes on a small machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
from calendar import month_name
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.decay import RandomUnitEmbedder
from bench.stats import cpu_model, summarize
from bot.app import App, build_app
from bot.config import Settings
from core.llm.client import count_tokens
from knowledge.records import Scope
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import prompt_sections, prompt_text

START = datetime(2027, 1, 1, 9, tzinfo=UTC)
TOPIC = re.compile(r"\btopic[a-z]+\d+\b")
SYLLABLES = ("ka", "lo", "mi", "ru", "ten", "vo", "xi", "za")
CHAT, MONITOR, SUMMARIZER = "chat-model", "monitor-model", "summarizer-model"


def topic(index: int) -> str:
    """A made-up word nobody else says: "topickalomi17"."""
    word = "".join(SYLLABLES[(index >> shift) % len(SYLLABLES)] for shift in (0, 3, 6))
    return f"topic{word}{index}"


def summarizer(body: dict[str, Any]) -> str:
    """The topics of what it is given, once each, as a summarizer keeps what matters."""
    text = prompt_text(body).split("<<<", 1)[-1]
    return "They talked about " + ", ".join(dict.fromkeys(TOPIC.findall(text))) + "."


async def talk(app: App, scope: Scope, clock: FakeClock, topics: list[str]) -> None:
    """One conversation about `topics`, three messages, then it closes (its episode is written)."""
    for line in (f"let me tell you about {topics[0]}", f"and also {topics[1]}", "that is all for today"):
        result = await app.companion.handle(make_message(line, user_id=scope.user_id, sent_at=clock.now()))
        await result.text()
        clock.advance(minutes=2)
    await app.companion.new_conversation(None, f"dm:{scope.user_id}")


def memory_tokens(request: Any) -> int:
    """Tokens of what a chat prompt's memory sections hold."""
    core, retrieved = prompt_sections(request)
    return count_tokens(core) + count_tokens(retrieved)


async def run(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-long-") as tmp, FakeOpenAIServer() as fake:
        fake.set_default(CHAT, "I see.")
        fake.set_default(MONITOR, "[SKIP]")
        fake.set_default(SUMMARIZER, summarizer)
        settings = Settings(
            storage={"data_dir": Path(tmp)},
            llm={"base_url": fake.url, "chat_model": CHAT, "monitor_model": MONITOR, "summarizer_model": SUMMARIZER},
            rate_limit_per_minute=0,
        )
        clock = FakeClock(START)
        app = await build_app(settings, clock=clock, embedder=RandomUnitEmbedder())
        try:
            return await simulate(app, fake, clock, args)
        finally:
            await app.aclose()


async def simulate(app: App, fake: FakeOpenAIServer, clock: FakeClock, args: argparse.Namespace) -> dict[str, object]:
    users = [Scope("xiaoxiang", f"cli:user{index}") for index in range(args.users)]
    month_topics: dict[tuple[Scope, int], set[str]] = {}
    talk_days = {round(day * 7 / args.per_week) for day in range(args.per_week)}
    started, count = time.perf_counter(), 0
    for day in range(args.weeks * 7):
        if day % 7 in talk_days:
            for scope in users:
                topics = [topic(count), topic(count + 1)]
                count += 2
                month_topics.setdefault((scope, clock.now().month), set()).update(topics)
                await talk(app, scope, clock, topics)
        await app.companion.tasks.drain()
        clock.advance(days=1)
        await app.companion.lifecycle.run_decay()  # as the scheduler runs it: chapters due, then decay
        await app.companion.tasks.drain()
    simulated = time.perf_counter() - started
    chat_tokens = [memory_tokens(request) for request in fake.requests_for(CHAT)]

    clock.advance(days=40)  # the year's last month folded too
    await app.companion.lifecycle.run_decay()
    await app.companion.tasks.drain()
    carried: list[float] = []
    for (scope, month), topics in sorted(month_topics.items(), key=lambda item: (item[0][0].user_id, item[0][1])):
        asked = f"what did we talk about in {month_name[month]}?"
        result = await app.companion.handle(make_message(asked, user_id=scope.user_id, sent_at=clock.now()))
        await result.text()
        shown = " ".join(prompt_sections(fake.requests_for(CHAT)[-1]))
        carried.append(len(topics & set(TOPIC.findall(shown))) / len(topics))

    stored: Counter[str] = Counter()
    for scope in users:
        stored.update(record.category for record in app.companion.knowledge.memories(scope))
        stored["messages"] += len(app.history.messages(scope))
    calls = [prompt_text(request) for request in fake.requests_for(SUMMARIZER)]
    chapters = Counter(_span(text) for text in calls if "<<<NOTES" in text)
    weeks = args.weeks * len(users)
    return {
        "cpu": cpu_model(),
        "users": len(users),
        "weeks": args.weeks,
        "conversations_per_week": args.per_week,
        "simulated_seconds": round(simulated, 1),
        "stored_at_end": dict(stored),
        "memory_tokens_per_chat_prompt": summarize(chat_tokens, digits=0),
        "month_topics_carried_when_asked": summarize([share * 100 for share in carried], digits=1),
        "chapter_calls": dict(chapters),
        "chapter_calls_per_week_per_user": round(sum(chapters.values()) / weeks, 3),
        "episode_calls_per_week_per_user": round((len(calls) - sum(chapters.values())) / weeks, 3),
    }


def _span(prompt: str) -> str:
    found = re.search(r"what one (week|month|year) ", prompt)
    return found[1] if found else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=2)
    parser.add_argument("--per-week", type=int, default=3, help="conversations a user has a week")
    parser.add_argument("--weeks", type=int, default=52)
    parser.add_argument("--json", action="store_true", help="print only the JSON line")
    args = parser.parse_args()
    figures = asyncio.run(run(args))
    if not args.json:
        print(f"CPU: {figures['cpu']}")
        print(f"{args.users} users, {args.per_week} conversations a week, {args.weeks} weeks")
        print(f"stored at the end: {figures['stored_at_end']}")
        print(f"memory tokens per chat prompt: {figures['memory_tokens_per_chat_prompt']}")
        carried = figures["month_topics_carried_when_asked"]
        print(f"share of a month's topics in the prompt when asked about it, %: {carried}")
        print(
            f"model calls per week per user: chapters {figures['chapter_calls_per_week_per_user']} "
            f"({figures['chapter_calls']}), episodes {figures['episode_calls_per_week_per_user']}"
        )
        print("the consolidation pass at 100,000 memories: python -m bench.consolidation")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
