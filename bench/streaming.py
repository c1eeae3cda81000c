"""Benchmark of how soon a reply shows on Telegram and Discord: time to first visible text, and to the whole reply.

What runs: an app built by ``bot.app.build_app`` in a fresh data directory (real embedder, embedded
chromadb, SQLite) whose ``OpenAIClient`` talks real HTTP to ``tests.fakes.openai_server.FakeOpenAIServer``,
which streams every reply at ``--tokens-per-second`` (one chunk of four characters per token, the
first after ``--llm-delay``). Then, for each platform and place, with streaming on and off (off: the
reply arrives whole, as every reply did before streaming):

* Telegram, a private chat and a group: the real python-telegram-bot ``Application`` of
  ``bot.platforms.telegram.adapter`` polling ``tests.fakes.telegram_server.FakeBotAPI`` over real HTTP; a message
  is pushed as an update, and the clock stops at the first ``sendMessageDraft`` / ``sendMessage`` the
  fake accepts for that chat (first visible text) and at the last accepted call of the reply (whole);
* Discord, a server channel: the real discord.py client of ``bot.platforms.discord.adapter`` under dpytest; the
  clock stops at the first message sent (first visible text) and at the last send or edit (whole).

``--replies`` messages are answered per case, one after another, each reply ``--reply-tokens`` tokens
long. Background work is off (``build_app(background=False)``): this measures what a person waits for.
Figures are p50 / p95 / mean / max in seconds.

Run from the repository root::

    python -m bench.streaming                                   # 400-token replies at 30 tokens/s
    python -m bench.streaming --replies 5 --reply-tokens 200
    python -m bench.streaming --json                            # plus one JSON line with every figure
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.background import MODELS, role_settings
from bench.stats import cpu_model, summarize
from bot.app import App, build_app
from bot.config import MemorySettings
from bot.platforms.telegram.adapter import build_telegram_application
from knowledge.search.embedding import Embedder, load_embedder
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import BOT_USERNAME, TOKEN, Call, FakeBotAPI, polling
from tests.fakes.telegram_updates import person, text_update

TARGET_FIRST_TEXT_S = 1.5
ALICE = person(101, "Alice")
GROUP = {"id": -1001, "type": "supergroup", "title": "Friends"}
_DELIVERIES = ("sendMessageDraft", "sendMessage", "editMessageText")


def story(tokens: int) -> str:
    """A reply of about `tokens` tokens (four-character chunks), in sentences and paragraphs."""
    words = [f"cat{index % 10}" for index in range(tokens * 4 // 5)]  # "catN " is five characters
    sentences = [" ".join(words[start : start + 12]) + "." for start in range(0, len(words), 12)]
    return "\n\n".join(" ".join(sentences[start : start + 5]) for start in range(0, len(sentences), 5))


class Stopwatch:
    """When a reply was asked for, when its first words showed and when its last update came."""

    def __init__(self) -> None:
        self.asked = 0.0
        self.first: float | None = None
        self.last = 0.0

    def start(self) -> None:
        self.asked, self.first, self.last = time.perf_counter(), None, 0.0

    def seen(self) -> None:
        now = time.perf_counter()
        self.first = self.first if self.first is not None else now
        self.last = now

    def figures(self) -> tuple[float, float]:
        assert self.first is not None, "no reply was seen"
        return self.first - self.asked, self.last - self.asked


async def telegram_case(
    app: App, fake: FakeBotAPI, chat: dict[str, Any], replies: int, reply: str
) -> list[tuple[float, float]]:
    """Messages to the bot in `chat`, one after another: (first visible, whole) seconds of each `reply`."""
    loop = asyncio.get_running_loop()
    watch = Stopwatch()
    done = asyncio.Event()
    text = "tell me a story" if chat["type"] == "private" else f"@{BOT_USERNAME} tell us a story"

    def on_call(call: Call) -> None:
        if call.accepted and call.method in _DELIVERIES and call.params.get("chat_id") == chat["id"]:
            loop.call_soon_threadsafe(watch.seen)
            if call.method != "sendMessageDraft" and call.params["text"] == reply:  # the reply, whole
                loop.call_soon_threadsafe(done.set)

    fake.listen(on_call)
    figures = []
    async with polling(build_telegram_application(app.platform("telegram"), TOKEN, fake.url)):
        for _ in range(replies):
            done.clear()
            watch.start()
            update = text_update(text, user=ALICE, chat=chat)
            if chat["type"] != "private":  # a group message is answered when it mentions the bot
                update["message"]["entities"] = [{"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}]
            fake.push_update(update)
            await asyncio.wait_for(done.wait(), 120)
            figures.append(watch.figures())
    return figures


async def discord_case(app: App, replies: int) -> list[tuple[float, float]]:
    """Messages mentioning the bot in a server channel: (first visible, whole) seconds of each reply."""
    import discord
    import discord.ext.test as dpytest  # a test dependency: only this benchmark needs it

    from bot.platforms.discord.adapter import build_discord_bot
    from tests.fakes.discord import record_http

    bot = build_discord_bot(app.platform("discord"))
    await bot._async_setup_hook()  # what discord.py sets up at login, which dpytest skips
    await bot.setup_hook()
    # dpytest's members exist only in a member cache, which Discord fills only with the members intent
    bot._connection._intents.members = True
    bot._connection.member_cache_flags = discord.MemberCacheFlags.all()
    dpytest.configure(bot, members=["Alice"])
    bot._connection.loop = asyncio.get_running_loop()
    http = record_http(bot)
    watch = Stopwatch()
    http.listeners.append(lambda kind, payload: watch.seen() if kind in ("send", "edit") else None)
    assert bot.user is not None
    figures = []
    for _ in range(replies):
        watch.start()
        await dpytest.message(f"<@{bot.user.id}> tell us a story", member=0)
        figures.append(watch.figures())
    await dpytest.empty_queue()
    return figures


async def run(args: argparse.Namespace, embedder: Embedder) -> dict[str, Any]:
    reply = story(args.reply_tokens)
    results: dict[str, Any] = {}
    with FakeOpenAIServer() as llm, FakeBotAPI() as telegram:
        llm.set_default(MODELS["chat"], reply)
        llm.delay = args.llm_delay
        llm.chunk_delay = 1 / args.tokens_per_second
        for streaming in (True, False):
            for case in ("telegram private", "telegram group", "discord server"):
                with tempfile.TemporaryDirectory(prefix="bench-streaming-") as data_dir:
                    settings = role_settings(Path(data_dir), llm.url).changed(
                        telegram={"streaming": streaming}, discord={"streaming": streaming}
                    )
                    app = await build_app(settings, embedder=embedder, background=False)
                    try:
                        print(f"{case}, streaming {'on' if streaming else 'off'}...", file=sys.stderr)
                        if case == "discord server":
                            figures = await discord_case(app, args.replies)
                        else:
                            chat = {**ALICE, "type": "private"} if case == "telegram private" else GROUP
                            telegram.reset()
                            figures = await telegram_case(app, telegram, chat, args.replies, reply)
                    finally:
                        await app.aclose()
                results[f"{case}, streaming {'on' if streaming else 'off'}"] = {
                    "first_visible_s": summarize([first for first, _ in figures], digits=3),
                    "whole_s": summarize([whole for _, whole in figures], digits=3),
                }
    return results


def print_report(args: argparse.Namespace, results: dict[str, Any]) -> None:
    stream_s = args.llm_delay + args.reply_tokens / args.tokens_per_second
    print(
        f"streaming: {args.reply_tokens}-token replies at {args.tokens_per_second:g} tokens/s "
        f"(the model takes {stream_s:.1f} s per reply), {args.replies} replies per case; CPU {cpu_model()}, "
        f"load average {os.getloadavg()[0]:.2f} at the end"
    )
    print(f"{'case':<38} {'first visible p50 / max':>24} {'whole reply p50 / max':>24}")
    for case, figures in results.items():
        first, whole = figures["first_visible_s"], figures["whole_s"]
        print(
            f"{case:<38} {first['p50']:>10.2f} s / {first['max']:>5.2f} s "
            f"{whole['p50']:>12.2f} s / {whole['max']:>5.2f} s"
        )
    for platform_case in ("telegram private", "telegram group", "discord server"):
        on = results[f"{platform_case}, streaming on"]["first_visible_s"]["max"]
        before = results[f"{platform_case}, streaming off"]["first_visible_s"]["p50"]
        verdict = "met" if on <= TARGET_FIRST_TEXT_S else "NOT met"
        print(
            f"{platform_case}: first text after at most {on:.2f} s, against {before:.2f} s before streaming "
            f"({before / on:.0f}x sooner); target <= {TARGET_FIRST_TEXT_S} s: {verdict}"
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.streaming", description=__doc__.split("\n")[0])
    parser.add_argument("--replies", type=int, default=3, help="replies timed per case (default 3)")
    parser.add_argument("--reply-tokens", type=int, default=400, help="tokens per reply (default 400)")
    parser.add_argument("--tokens-per-second", type=float, default=30.0, help="the fake model's speed (default 30)")
    parser.add_argument("--llm-delay", type=float, default=0.3, help="seconds before the first token (default 0.3)")
    parser.add_argument("--json", action="store_true", help="print one JSON line with every figure at the end")
    args = parser.parse_args(argv)
    if args.replies < 1 or args.reply_tokens < 1 or args.tokens_per_second <= 0 or args.llm_delay < 0:
        parser.error("replies, reply-tokens and tokens-per-second must be positive, llm-delay not negative")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    embedder = load_embedder(MemorySettings.model_fields["embedder"].default)
    embedder.embed_queries(["warm-up"])
    results = asyncio.run(run(args, embedder))
    print_report(args, results)
    if args.json:
        line = {
            "benchmark": "streaming",
            "reply_tokens": args.reply_tokens,
            "tokens_per_second": args.tokens_per_second,
            "llm_delay_s": args.llm_delay,
            "replies": args.replies,
            "cpu": cpu_model(),
            "python": platform.python_version(),
            "results": results,
        }
        print(json.dumps(line))


if __name__ == "__main__":
    main()
