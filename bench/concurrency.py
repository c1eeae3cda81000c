"""Benchmark of many users talking to the Telegram bot at once.

What runs: the real python-telegram-bot ``Application`` of ``bot.platforms.telegram.adapter`` (with its
``PerChatUpdateProcessor``) polling ``tests.fakes.telegram_server.FakeBotAPI`` over real HTTP, and an app
built by ``bot.app.build_app`` in a fresh data directory (real embedder, embedded chromadb, SQLite) whose
``OpenAIClient`` talks real HTTP to ``tests.fakes.openai_server.FakeOpenAIServer``. The fake LLM answers
every request after ``--llm-delay`` seconds (default 0.3); with ``--tokens-per-second`` it streams each
reply at that speed (a token being a chunk of four characters), and ``--reply-tokens`` pads every chat
reply to about that many tokens. Replies grow as drafts while they stream (streaming is on, as by
default), so the bot also sends the drafts, paced and within Telegram's flood limits. Both fakes run
in this process; their threads used under 5% of the CPU of a saturated run (py-spy), so they do not shape the figures.

``--users`` simulated users (default 200), each in their own private chat, each send ``--messages``
messages (default 5) one after another, the next only once the reply to the previous one has reached the
fake Bot API (a user waits for the answer) and ``--think`` seconds more. With no think time (the default)
all users start together and the bot is never idle: the hardest case. People take seconds to read and
type; with a think time, users start evenly spread over one think time, like people already in
conversation, rather than in one burst. Messages are the scripted lines of ``bench.background``
(English, Chinese, code-mixed), each stating something about the user, and small talk between them
(``--small-talk``, default 20% of the messages: "ok", "haha", "好的", "👍"; people send such turns too, and the
monitor is spared those that answer nothing the companion asked). Each message is tagged with its user and
number in invisible characters; the chat model's reply repeats the tag, so every reply is matched to the
message it answers.

Background work is ON, as in production: after every turn the KnowledgeMonitor calls the same fake
(``bench.background``'s scripted monitor: ADD of the stated fact for about half of the turns, some
BOOSTs), so replies compete with it for the event loop, the CPU and the embedder. ``--no-background``
switches it off to show what it costs. The per-user rate limit is off (simulated users type faster than
people). The scheduler is not started (its passes could not fire during a run). Telegram's own limit stays on:
a bot may send about 30 messages a second overall, and the flood control holds replies to it, so no run answers
faster than that whatever the machine (at 1,000 users the LLM-bound ideal is 49.3 a second: at most 61% of it);
``--telegram-rate`` lifts it to measure the companion itself.

Reported:

* **throughput**: messages answered per second, from the start to the last reply, against the LLM-bound
  ideal (and the share of Telegram's limit it used, where that is lower), where every user's messages take the
  model's time for each (``llm-delay``, plus the reply's tokens / ``tokens-per-second`` when streaming) and
  ``(messages - 1) x think`` after their start (with no think time and no streaming: users / llm-delay messages
  per second); target >= 95%;
* **added latency** per message, p50 / p95 / max: the time from pushing the update to the fake until the
  bot's final ``sendMessage`` reached it, minus the model's time for that reply;
* **lost** messages (no reply by the end of the run, after ``--reply-timeout`` per message) and
  **duplicated** replies (a message answered more than once), target 0 both; replies sent to the wrong
  chat are counted too;
* total wall time, and how long the background backlog took to drain after the last reply;
* **CPU per answered message** by component (``bench.cpu_account``: query embedding, passage embeddings,
  search, prompt, SQLite, chromadb, event loop, other threads), from the first message until the
  background is drained, so background included; and **throughput per core**: messages answered per
  second per core of the machine, and per CPU-second the process used. The fakes' threads are among
  "other threads";
* **embeddings**: texts embedded per answered message, and texts per call of the engine (each embedding lane
  embeds what waited for it in one call, so under load a call holds more than one).

What bounds it: each answered message costs CPU for its embeddings (a query on the reply path, the
message and the reply as passages in the background, and a new fact now and then: 30-34 ms for
these messages with e5 on ONNX Runtime) and for the event loop (the Bot API and LLM calls on aiohttp,
SSE parsing; 11-15 ms), so a saturated run measures how many of those the machine does per second,
not the LLM delay; the CPU account says which (docs/performance/benchmarks.md). ``--no-account`` leaves
the seams untimed: each takes the thread's CPU time, a system call made holding the GIL.

Run from the repository root::

    python -m bench.concurrency                          # 200 users x 5 messages, LLM 300 ms
    python -m bench.concurrency --users 50 --messages 10 --llm-delay 0.5
    python -m bench.concurrency --think 10               # users at a human pace
    python -m bench.concurrency --no-background --json   # plus one JSON line with every figure
    python -m bench.concurrency --think 20 --tokens-per-second 30 --reply-tokens 120   # streamed replies
    python -m bench.concurrency --processes 1,2,4        # server mode: N `companion run` behind a proxy

``--processes`` runs the same users against server mode instead (see ``bench.cluster``): PostgreSQL,
a Chroma server and N real bot processes serving Telegram webhooks, the updates spread over them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from telegram.constants import FloodLimit

from bench.background import MODELS, SMALL_TALK, Roles, role_settings, script
from bench.cpu_account import CPUAccount, per_turn_ms, print_account
from bench.stats import cpu_model, load_average, summarize
from bot.app import build_app
from bot.config import MemorySettings
from bot.platforms.telegram.adapter import build_telegram_application
from bot.platforms.telegram.flood_control import FloodControl
from knowledge.journal.token_usage import SPARED
from knowledge.search.embedding import Embedder, load_embedder
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import TOKEN, Call, FakeBotAPI, polling
from tests.fakes.telegram_updates import person, text_update

TARGET_EFFICIENCY = 0.95
CHUNK_CHARS = FakeOpenAIServer.chunk_size  # a streamed token
FIRST_USER_ID = 10_000  # Telegram user ids of the simulated users, one private chat each
# A message's tag is written in invisible characters (Unicode format characters, which a reader and the small-talk
# rule pass over), so that "ok" tagged is still small talk: a digit each, between two marks, user and number apart.
_DIGITS = "\u200b\u200c\u200d\u2060\u2061\u2062\u2066\u2067\u2068\u2069"
_MARK, _APART = "\u2063", "\u2064"
_TAG = re.compile(f"{_MARK}([{_DIGITS}]+){_APART}([{_DIGITS}]+){_MARK}")

Tag = tuple[int, int]  # (user index, message index)


def _tag(user: int, number: int) -> str:
    def invisible(value: int) -> str:
        return "".join(_DIGITS[int(digit)] for digit in str(value))

    return f"{_MARK}{invisible(user)}{_APART}{invisible(number)}{_MARK}"


def _tag_in(text: str) -> Tag | None:
    found = _TAG.search(text)
    if found is None:
        return None
    user, number = ("".join(str(_DIGITS.index(char)) for char in part) for part in found.groups())
    return int(user), int(number)


@dataclass
class Traffic:
    """What the users sent and what the bot sent back, by tag; lives on the event loop."""

    sent_at: dict[Tag, float] = field(default_factory=dict)
    replied_at: dict[Tag, list[float]] = field(default_factory=lambda: defaultdict(list))
    misplaced: int = 0  # replies in a chat other than the one the message came from
    untagged: int = 0  # replies that answer no message (apologies, notices)
    waiting: dict[int, tuple[Tag, asyncio.Future[None]]] = field(default_factory=dict)
    model_s: dict[Tag, float] = field(default_factory=dict)  # what the model took for each reply

    def listen_to(self, fake: FakeBotAPI) -> None:
        """Count every reply `fake` receives: stamped as it arrives (on the fake's thread), counted on this loop."""
        loop = asyncio.get_running_loop()

        def on_call(call: Call) -> None:
            if call.method == "sendMessage" and call.accepted:
                at = time.perf_counter()
                loop.call_soon_threadsafe(self.replied, int(call.params["chat_id"]), call.params["text"], at)

        fake.listen(on_call)

    def replied(self, chat_id: int, text: str, at: float) -> None:
        tag = _tag_in(text)
        if tag is None:
            self.untagged += 1
            return
        if FIRST_USER_ID + tag[0] != chat_id:
            self.misplaced += 1
        self.replied_at[tag].append(at)
        expected, future = self.waiting.get(tag[0], (None, None))
        if expected == tag and future is not None and not future.done():
            future.set_result(None)


def _start(user: int, args: argparse.Namespace) -> float:
    """Seconds after the start at which `user` sends their first message."""
    return args.think * user / args.users


Deliver = Callable[[dict[str, Any]], Awaitable[object]]  # hands one update to the bot(s)


async def converse(
    deliver: Deliver, traffic: Traffic, user: int, texts: Sequence[str], args: argparse.Namespace
) -> None:
    """One user: each message, then wait for its reply (or give up on it after `--reply-timeout`) and think."""
    who = person(FIRST_USER_ID + user, f"User{user}")
    loop = asyncio.get_running_loop()
    await asyncio.sleep(_start(user, args))
    for number, text in enumerate(texts):
        if number:
            await asyncio.sleep(args.think)
        tag = (user, number)
        future: asyncio.Future[None] = loop.create_future()
        traffic.waiting[user] = (tag, future)
        traffic.sent_at[tag] = time.perf_counter()
        await deliver(text_update(text, user=who))
        try:
            await asyncio.wait_for(future, args.reply_timeout)
        except TimeoutError:
            pass  # counted as lost unless the reply still comes before the end


def conversations(args: argparse.Namespace) -> tuple[dict[int, list[str]], Roles]:
    """Each simulated user's tagged messages, and the fake LLM's roles that answer them."""
    lines = {user: script(user, args.messages, args.small_talk) for user in range(args.users)}
    texts = {
        user: [f"{line.text}{_tag(user, number)}" for number, line in enumerate(said)] for user, said in lines.items()
    }
    facts = {text: line.fact for user, said in lines.items() for text, line in zip(texts[user], said)}
    return texts, Roles(facts)


async def push(telegram: FakeBotAPI, update: dict[str, Any]) -> None:
    """Deliver an update to a polling bot: queue it at the fake Bot API."""
    telegram.push_update(update)


def tagged_chat(roles: Roles, traffic: Traffic, args: argparse.Namespace) -> Any:
    """The scripted chat reply, padded to `--reply-tokens`, repeating the tag of the message it answers."""

    def reply(body: dict[str, Any]) -> str:
        said = str(body["messages"][-1]["content"])
        tag = _tag_in(said)
        text = roles.chat(body)
        while len(text) < args.reply_tokens * CHUNK_CHARS:
            text += " " + _FILLER
        text = f"{text}{_tag(*tag) if tag else ''}"
        if tag is not None:
            traffic.model_s[tag] = model_seconds(text, args)
        return text

    return reply


_FILLER = "And then the cat slept on the warm windowsill."


def model_seconds(reply: str, args: argparse.Namespace) -> float:
    """How long the fake model takes for `reply`: its delay, then (streaming) a chunk per token."""
    chunks = -(-len(reply) // CHUNK_CHARS)
    return args.llm_delay + (chunks / args.tokens_per_second if args.tokens_per_second else 0.0)


async def run(args: argparse.Namespace, embedder: Embedder, account: CPUAccount) -> dict[str, Any]:
    texts, roles = conversations(args)
    traffic = Traffic()
    with (
        FakeOpenAIServer() as llm,
        FakeBotAPI() as telegram,
        tempfile.TemporaryDirectory(prefix="bench-concurrency-") as data_dir,
    ):
        roles.install(llm)
        llm.set_default(MODELS["chat"], tagged_chat(roles, traffic, args))
        llm.delay = args.llm_delay
        llm.chunk_delay = 1 / args.tokens_per_second if args.tokens_per_second else 0.0
        app = await build_app(role_settings(Path(data_dir), llm.url), embedder=embedder, background=args.background)
        await app.start(schedule=False)
        traffic.listen_to(telegram)
        try:
            flood_control = FloodControl(per_second=args.telegram_rate)
            bot = build_telegram_application(app.platform("telegram"), TOKEN, telegram.url, flood_control=flood_control)
            async with polling(bot):
                print(f"{args.users} users x {args.messages} messages...", file=sys.stderr)
                cpu_before, embedded_before = account.snapshot(), embedder.cpu.calls()
                started = time.perf_counter()
                deliver = partial(push, telegram)
                await asyncio.gather(*(converse(deliver, traffic, user, said, args) for user, said in texts.items()))
                wall = time.perf_counter() - started
            waiting, scopes_waiting = app.journal.jobs.backlog().pending, len(app.journal.jobs.scopes_with_work())
            drain_started, drain_cpu, drain_account = time.perf_counter(), time.process_time(), account.snapshot()
            await app.companion.tasks.drain()
            drain = time.perf_counter() - drain_started
            drain_cpu = time.process_time() - drain_cpu
            cpu = (cpu_before, account.snapshot())
            texts_embedded, embedding_calls = (now - then for now, then in zip(embedder.cpu.calls(), embedded_before))
            dead_letters = len(app.journal.jobs.dead_letters())
            spared = sum(usage.calls for usage in app.journal.usage.totals() if usage.model == SPARED)
        finally:
            await app.aclose()
        monitor_calls = len(llm.requests_for(MODELS["monitor"]))
    figures = report(args, traffic, wall, drain, monitor_calls, dead_letters)
    small_talk = sum(text.split(_MARK)[0] in SMALL_TALK for said in texts.values() for text in said)
    figures |= {
        "small_talk_sent": small_talk,
        "monitor_spared": spared,
        "jobs_waiting_at_last_reply": waiting,
        "users_waiting_at_last_reply": scopes_waiting,
        "drain_cpu_s": round(drain_cpu, 1),
        "drain_cpu_ms_per_job": per_turn_ms(drain_account, cpu[1], max(waiting, 1)),
        "texts_embedded_per_message": round(texts_embedded / max(figures["answered"], 1), 2),
        "texts_per_embedding_call": round(texts_embedded / max(embedding_calls, 1), 2),
    }
    return {**figures, **cpu_figures(*cpu, answered=figures["answered"], wall=wall)}


def cpu_figures(before: dict[str, float], after: dict[str, float], *, answered: int, wall: float) -> dict[str, Any]:
    """CPU per answered message by component (background included), and throughput per core."""
    cores = os.cpu_count() or 1
    cpu_seconds = after["total"] - before["total"]
    return {
        "cpu_ms_per_message": per_turn_ms(before, after, max(answered, 1)),
        "answered_per_s_per_core": round(answered / wall / cores, 2),
        "answered_per_cpu_s": round(answered / cpu_seconds, 2) if cpu_seconds > 0 else 0.0,
        "cores": cores,
    }


def report(
    args: argparse.Namespace, traffic: Traffic, wall: float, drain: float, monitor_calls: int, dead_letters: int
) -> dict[str, Any]:
    sent = len(traffic.sent_at)
    answered = [tag for tag in traffic.sent_at if traffic.replied_at.get(tag)]
    model_s = {tag: traffic.model_s.get(tag, args.llm_delay) for tag in traffic.sent_at}
    added_ms = [(traffic.replied_at[tag][0] - traffic.sent_at[tag] - model_s[tag]) * 1000 for tag in answered]
    throughput = len(answered) / wall
    busy: dict[int, float] = defaultdict(float)  # per user: what the model takes for all their messages
    for (user, _), seconds in model_s.items():
        busy[user] += seconds
    ideal_wall = max(_start(user, args) + busy[user] + (args.messages - 1) * args.think for user in busy)
    ideal = args.users * args.messages / ideal_wall
    return {
        "sent": sent,
        "answered": len(answered),
        "lost": sent - len(answered),
        "duplicated": sum(len(times) - 1 for times in traffic.replied_at.values() if len(times) > 1),
        "misplaced": traffic.misplaced,
        "untagged": traffic.untagged,
        "wall_s": round(wall, 2),
        "ideal_wall_s": round(ideal_wall, 2),
        "throughput_per_s": round(throughput, 1),
        "ideal_throughput_per_s": round(ideal, 1),
        "efficiency": round(throughput / ideal, 3),
        "added_latency_ms": summarize(added_ms) if added_ms else {},
        "background_drain_s": round(drain, 1),
        "monitor_calls": monitor_calls,
        "dead_letters": dead_letters,
    }


def print_report(args: argparse.Namespace, figures: dict[str, Any], embedder: Embedder) -> None:
    latency = figures["added_latency_ms"]
    efficiency = figures["efficiency"]
    verdict = "met" if efficiency >= TARGET_EFFICIENCY else "NOT met"
    background = "ON (monitor after every turn)" if args.background else "OFF"
    streaming = (
        f", streaming {args.reply_tokens}-token replies at {args.tokens_per_second:g} tokens/s"
        if args.tokens_per_second
        else ""
    )
    print(
        f"concurrency: {args.users} users x {args.messages} messages, fake LLM {args.llm_delay * 1000:.0f} ms"
        f"{streaming}, think {args.think:g} s, background {background}, embedder {embedder.name}; "
        f"CPU {cpu_model()}, load average {os.getloadavg()[0]:.2f} at the end"
    )
    print(
        f"throughput     {figures['throughput_per_s']:.1f} answered/s of an LLM-bound ideal "
        f"{figures['ideal_throughput_per_s']:.1f}/s = {efficiency:.1%}   target >= {TARGET_EFFICIENCY:.0%}: {verdict}"
    )
    if args.telegram_rate < figures["ideal_throughput_per_s"]:
        print(
            f"Telegram       lets the bot send {args.telegram_rate:g} messages a second: at most "
            f"{args.telegram_rate / figures['ideal_throughput_per_s']:.1%} of the ideal; "
            f"{figures['throughput_per_s'] / args.telegram_rate:.1%} of the limit used (--telegram-rate lifts it)"
        )
    print(f"wall time      {figures['wall_s']:.1f} s (ideal {figures['ideal_wall_s']:.1f} s)")
    if latency:
        print(
            f"added latency  p50 {latency['p50']:.0f} ms, p95 {latency['p95']:.0f} ms, max {latency['max']:.0f} ms "
            "(the whole reply reached the Bot API, minus the model's time for it)"
        )
    print(
        f"messages       {figures['sent']} sent, {figures['answered']} answered, lost {figures['lost']}, "
        f"duplicated {figures['duplicated']}, in a wrong chat {figures['misplaced']}, "
        f"unmatched replies {figures['untagged']}   target 0 lost, 0 duplicated"
    )
    print(f"small talk     {figures['small_talk_sent']} of the messages sent ({args.small_talk:.0%} asked)")
    if args.background:
        print(
            f"background     {figures['monitor_calls']} monitor calls, {figures['monitor_spared']} spared (small "
            f"talk); backlog drained {figures['background_drain_s']:.1f} s after the last reply; "
            f"{figures['dead_letters']} dead letters"
        )
        waiting, users = figures["jobs_waiting_at_last_reply"], figures["users_waiting_at_last_reply"]
        print(
            f"drain          {waiting} jobs of {users} users waited at the last reply; "
            f"their drain took {figures['drain_cpu_s']:.1f} CPU-s of the process "
            f"({1000 * figures['drain_cpu_s'] / max(waiting, 1):.1f} ms a job)"
        )
    print(
        f"per core       {figures['answered_per_s_per_core']:.2f} answered/s per core ({figures['cores']} cores), "
        f"{figures['answered_per_cpu_s']:.2f} answered per CPU-second of the process"
    )
    seams = "" if args.account else " (--no-account: SQLite, search, prompt and chromadb in the thread that ran them)"
    print_account(f"CPU ms per answered message, background included{seams}:", figures["cpu_ms_per_message"])
    if args.background:
        print_account(f"CPU ms per job of the drain after the last reply{seams}:", figures["drain_cpu_ms_per_job"])
    print(
        f"embeddings     {figures['texts_embedded_per_message']:.2f} texts a message, "
        f"{figures['texts_per_embedding_call']:.2f} texts a call of the engine (a lane gathers what waits)"
    )


def print_cluster(args: argparse.Namespace, results: Sequence[dict[str, Any]]) -> None:
    """Throughput per process count, and where the CPU went."""
    print(
        f"server mode: {args.users} users x {args.messages} messages, fake LLM {args.llm_delay * 1000:.0f} ms, "
        f"think {args.think:g} s, background ON; CPU {cpu_model()}, {os.cpu_count()} cores; "
        f"load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}"
    )
    base = results[0]["throughput_per_s"]
    for run in results:
        latency, throughput = run["added_latency_ms"], run["throughput_per_s"]
        print(
            f"{run['processes']} processes: {throughput:.1f} answered/s ({throughput / base:.2f}x),"
            f" added latency p50 {latency.get('p50', 0):.0f} ms p95 {latency.get('p95', 0):.0f} ms,"
            f" lost {run['lost']}, duplicated {run['duplicated']}, dead letters {run['dead_letters']},"
            f" drain {run['background_drain_s']} s"
        )
        spent = ", ".join(f"{name} {ms:.0f}" for name, ms in run["cpu_s_per_answer"].items())
        print(f"   CPU ms per answered message: {spent}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency", description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=200, help="simulated users at once (default 200)")
    parser.add_argument("--messages", type=int, default=5, help="messages per user, one after another (default 5)")
    parser.add_argument("--llm-delay", type=float, default=0.3, help="seconds the fake LLM takes per request")
    parser.add_argument("--think", type=float, default=0.0, help="seconds a user takes to write the next message")
    parser.add_argument(
        "--tokens-per-second", type=float, default=0.0, help="stream replies at this speed (default 0: at once)"
    )
    parser.add_argument("--reply-tokens", type=int, default=0, help="pad chat replies to about this many tokens")
    parser.add_argument("--reply-timeout", type=float, default=120.0, help="seconds a user waits for a reply")
    parser.add_argument(
        "--small-talk",
        type=float,
        default=0.2,
        help="share of the messages that are small talk ('ok', 'haha', '好的', an emoji) instead of a scripted line "
        "(default 0.2; 0: every message states something, as before)",
    )
    parser.add_argument("--no-background", dest="background", action="store_false", help="no monitor jobs")
    parser.add_argument(
        "--telegram-rate",
        type=float,
        default=FloodLimit.MESSAGES_PER_SECOND,
        help="messages a second the bot may send overall (default 30, Telegram's limit; raise it to measure the "
        "companion without the platform's cap)",
    )
    parser.add_argument(
        "--no-account",
        dest="account",
        action="store_false",
        help="no timing at the seams (each takes the thread's CPU time, a system call on the event loop): "
        "only the embeddings, the event loop and the other threads (fakes included) are told apart",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line with every figure at the end")
    parser.add_argument(
        "--processes", help="server mode with this many bot processes, comma-separated to compare (1,2,4)"
    )
    args = parser.parse_args(argv)
    if args.processes:
        args.processes = [int(count) for count in args.processes.split(",")]
    if args.users < 1 or args.messages < 1 or args.llm_delay <= 0 or args.reply_timeout <= 0 or args.think < 0:
        parser.error("users, messages, llm-delay and reply-timeout must be positive, think not negative")
    if not 0 <= args.small_talk <= 1:
        parser.error("small-talk is a share, from 0 to 1")
    if args.tokens_per_second < 0 or args.reply_tokens < 0:
        parser.error("tokens-per-second and reply-tokens must not be negative")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    if args.processes:
        from bench.cluster import run_all

        results = asyncio.run(run_all(args))
        print_cluster(args, results)
        print(f"total runtime {time.perf_counter() - started:.1f} s")
        if args.json:
            print(json.dumps({"benchmark": "concurrency", "mode": "server", "cpu": cpu_model(), "runs": results}))
        return
    embedder = load_embedder(MemorySettings.model_fields["embedder"].default)
    embedder.embed_queries(["warm-up"])
    account = CPUAccount(embedder.cpu)
    with account.instrumented() if args.account else contextlib.nullcontext(account):
        figures = asyncio.run(run(args, embedder, account))
    print_report(args, figures, embedder)
    print(f"total runtime {time.perf_counter() - started:.1f} s")
    if args.json:
        print(
            json.dumps(
                {
                    "benchmark": "concurrency",
                    "users": args.users,
                    "messages": args.messages,
                    "llm_delay_s": args.llm_delay,
                    "think_s": args.think,
                    "tokens_per_second": args.tokens_per_second,
                    "reply_tokens": args.reply_tokens,
                    "cpu": cpu_model(),
                    "load_average": load_average(),
                    "background": args.background,
                    "account": args.account,
                    "embedder": embedder.name,
                    "python": platform.python_version(),
                    "machine": platform.machine(),
                    **figures,
                }
            )
        )


if __name__ == "__main__":
    main()
