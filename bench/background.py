"""Benchmark of the background memory roles: what they cost the reply, and what they cost in tokens.

Two targets of the memory-lifecycle issue are measured on a scripted conversation:

1. **time to reply, background ON ÷ OFF** (target ≤ 1.05). "Time to reply" is the wall time from
   ``Companion.handle(msg)`` until the reply stream is fully consumed (``TurnResult.text()``), which
   includes storing the reply and -- when ON -- the monitor job written with the message
   (``MemoryLifecycle.turn_started``) and started when the turn ends.

   * ON is the normal app of ``bot.app.build_app``: the KnowledgeMonitor after every turn, the
     ConversationSummarizer whenever messages left the working-memory window, the MemoryReviewer
     whenever the monitor's BOOSTs ask for a promote review.
   * OFF is the same app built with ``build_app(..., background=False)``: the lifecycle's events submit
     no job, so no background role is ever called.

   Both run the same scripted conversation: ``--users`` users (default 3) one after another, each
   ``--turns`` turns (default 100) in its own conversation, sent one after another with ``--think``
   seconds (default 0.05) between a consumed reply and the next message, so background work of a
   turn overlaps the next turns as it would in real use. Each mode gets a fresh app and data directory
   (``tempfile.TemporaryDirectory``); OFF runs first, then ON. ``App.start(schedule=False)`` in both:
   the scheduler's passes (daily decay cron, 5-minute idle check of a 30-minute timeout) could not fire
   during a run anyway.

   ON also differs from OFF by what the background produced: its store holds the facts and episodes,
   so retrieval searches a populated collection and the chat prompt carries memories, while OFF
   searches an empty one. That is part of the honest cost of ON, not contention alone. The ratio moves
   by a few percent between runs (a ~10-20 ms difference on a ~260 ms turn): run it more than once.

2. **background tokens per user turn** (target ≤ 1,500 on average): every prompt and completion of
   the monitor, summarizer and reviewer, counted with ``core.llm.client.count_tokens`` (each prompt message
   also costs ``MESSAGE_OVERHEAD_TOKENS`` of framing, as in the roles' own ``tokens`` fields), summed
   over the run after ``companion.tasks.drain()`` and divided by the number of user turns. Prompts are
   read from the fake server's recorded requests, completions are the scripted answers as recorded
   by the answering callables. Reported total and per role, prompt (of which system message) and
   completion, plus the chat prompt tokens per turn for context.

   Tokens are given for two pacings: the timed ON run (50 ms think time: the background cannot keep
   up, so summarize jobs queue and each summarises a larger batch), and a **paced** ON run
   (``--no-paced`` skips it) with the fake answering at once and ``drain()`` after every turn -- the
   background always catches up before the next message, as with a person typing at human speed.
   The paced figure is the one to compare with the target (more, smaller summarizer calls: usually the higher).

The LLM is the real ``OpenAIClient`` talking real HTTP to ``tests.fakes.openai_server.FakeOpenAIServer``,
which answers every request after ``--delay`` seconds (default 0.2). Each role has its own model name
so the fake scripts it separately:

* chat: a short in-character reply (two or three sentences, Chinese or English like the user);
* monitor: ``[ADD] <the fact the message states>`` for about half of the turns, ``[BOOST:<id>]`` of one
  of the first memories listed in its prompt about a third of the time, ``[SKIP]`` when neither;
* summarizer: a one-sentence summary naming the first fact of the transcript;
* reviewer: a one-sentence reason and ``[KEEP]``.

User messages are generated from templates (English, Chinese and code-mixed, about 10-30 words, each
with the fact it states) with a seeded ``random.Random``; the monitor's choices are seeded by the
message text, so every run scripts the same answers. The embedder is the real one, loaded once.

Run from the repository root::

    python -m bench.background                   # 3 users x 100 turns, ON vs OFF, plus the paced token run
    python -m bench.background --turns 50 --users 1
    python -m bench.background --json            # plus one JSON line with every figure
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import platform
import random
import re
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench import templates
from bench.stats import summarize
from bot.app import App, build_app
from bot.config import MemorySettings, Settings
from core.llm.client import MESSAGE_OVERHEAD_TOKENS, count_tokens
from core.types import ConversationRef, IncomingMessage, UserRef
from knowledge.records import Scope
from knowledge.search.embedding import Embedder, load_embedder
from tests.fakes.openai_server import FakeOpenAIServer

SEED = 20240612
MODELS = {
    "chat": "bench-chat",
    "monitor": "bench-monitor",
    "summarizer": "bench-summarizer",
    "reviewer": "bench-reviewer",
}
BACKGROUND_ROLES = ("monitor", "summarizer", "reviewer")
SPEAKERS = ["Alice", "小美", "Ben", "阿杰", "Chloe"]
TARGET_RATIO = 1.05
TARGET_TOKENS_PER_TURN = 1500
ADD_SHARE = 0.5  # turns the monitor ADDs the stated fact
BOOST_SHARE = 0.35  # turns the monitor BOOSTs a shown memory

# --- the scripted conversation -----------------------------------------------------------------

# (what the user says, the fact it states: what a good monitor would ADD)
TEMPLATES: list[tuple[str, str]] = [
    # English
    (
        (
            "Ugh, my {relation_en} {name_en} called again tonight. They're seriously thinking about moving to "
            "{city_en} for a new job as a {job_en}."
        ),
        "主人's {relation_en} {name_en} is thinking about moving to {city_en} to work as a {job_en}.",
    ),
    (
        (
            "I tried making {food_en} at home today and honestly it was a disaster, but I still love it more "
            "than anything."
        ),
        "主人 loves {food_en}, even after failing to cook it at home.",
    ),
    (
        (
            "Guess what, I finally signed up for a {hobby_en} class! The first lesson is next {weekday_en} "
            "evening and I'm a bit nervous."
        ),
        "主人 signed up for a {hobby_en} class; the first lesson is on a {weekday_en} evening.",
    ),
    (
        ("Work was brutal today. Being a {job_en} means nobody notices when things go right, only when they go wrong."),
        "主人 works as a {job_en} and feels unappreciated at work.",
    ),
    (
        (
            "My cat, well, {pet_en}, knocked my coffee off the desk this morning right before my video call. "
            "Classic {weekday_en}."
        ),
        "主人 has {pet_en}.",
    ),
    (
        (
            "I'm so tired of checking every menu for {allergen_en}. Being allergic makes eating out with "
            "friends really stressful."
        ),
        "主人 is allergic to {allergen_en}.",
    ),
    (
        ("I'm taking the {exam_en} exam in {month_en} and I haven't even finished half of the practice tests yet."),
        "主人 is taking the {exam_en} exam in {month_en}.",
    ),
    (
        (
            "It's already {late} and I still can't sleep. I keep thinking about the presentation I have to "
            "give tomorrow."
        ),
        "主人 can't sleep before presentations.",
    ),
    (
        (
            "Just got tickets to see {band} in {city_en} this {month_en}! I've wanted to see them live since "
            "high school."
        ),
        "主人 has tickets to see {band} in {city_en} in {month_en}.",
    ),
    (
        ("Nothing special today, just {drink_en} and a long walk after lunch. Sometimes quiet days are the best ones."),
        "主人 enjoys {drink_en} and a walk after lunch on quiet days.",
    ),
    (
        (
            "{name_en} from my {hobby_en} group invited me to dinner on {weekday_en}. Should I go? I barely "
            "know anyone there."
        ),
        "主人 was invited to dinner by {name_en} from the {hobby_en} group.",
    ),
    (
        (
            "So my {relation_en} and I finally talked things through last night, and it went so much better "
            "than I expected."
        ),
        "主人 made up with their {relation_en} after a long talk.",
    ),
    # Chinese
    (
        "今天{relation_zh}{name_zh}打电话来，说想搬去{city_zh}当{job_zh}，我心里有点舍不得。",
        "主人的{relation_zh}{name_zh}打算搬去{city_zh}当{job_zh}。",
    ),
    ("刚下班，晚上想去吃{food_zh}，可是一个人去又觉得有点孤单，你说我要不要叫上同事？", "主人喜欢吃{food_zh}。"),
    (
        "我最近开始{hobby_zh}了，每个{weekday_zh}晚上练一个小时，感觉压力小了很多。",
        "主人每个{weekday_zh}晚上{hobby_zh}，用来减压。",
    ),
    (
        "好累啊，已经{late_zh}了还在改方案，当{job_zh}真的太辛苦了，明天还要早起开会。",
        "主人是{job_zh}，经常加班到很晚。",
    ),
    ("家里的{pet_zh}今天生病了，带去医院花了好多钱，不过医生说没什么大问题。", "主人养了{pet_zh}。"),
    ("我{month_n}月要考{exam_zh}，现在每天复习到很晚，总担心自己准备得不够。", "主人{month_n}月要考{exam_zh}。"),
    (
        "周末和朋友去了{place_zh}散步，天气特别好，拍了很多照片，好久没这么放松了。",
        "主人周末喜欢去{place_zh}散步拍照。",
    ),
    ("我对{allergen_zh}过敏，今天差点吃错东西，还好同事及时提醒了我。", "主人对{allergen_zh}过敏。"),
    (
        "最近一直在听{band}的歌，听说他们下个月要来{city_zh}开演唱会，好想去！",
        "主人喜欢{band}，想去{city_zh}看演唱会。",
    ),
    ("每天早上不喝{drink_zh}就没精神，今天忘了买，整个上午都迷迷糊糊的。", "主人每天早上都要喝{drink_zh}。"),
    # code-mixed
    (
        "今天的 weekly meeting 又开了两个小时，manager {name_en} 一直在挑刺，I'm so done with this week.",
        "主人的 manager {name_en} 很严格，开会经常挑刺。",
    ),
    (
        "周末想去{city_zh}玩两天，any ideas for food? 我想吃{food_zh}但是怕排队太久。",
        "主人打算周末去{city_zh}玩，想吃{food_zh}。",
    ),
    (
        "我终于把 {hobby_en} 的第一个作品完成了！虽然不完美 but I'm really proud of it.",
        "主人完成了第一个{hobby_en}作品，很自豪。",
    ),
]

# Small talk people send between the lines above: acknowledgements, laughs, thanks (nothing to remember, unless
# they answer what the companion asked; the monitor is spared those that do not: `knowledge/rules/small_talk.py`).
SMALL_TALK = ["ok", "haha", "thanks!", "lol", "ok thanks", "👍", "好的", "嗯嗯", "哈哈哈", "谢谢～", "晚安", "😂"]

CHAT_REPLIES_ZH = [
    "听起来今天真的不容易呢～主人先喝口水歇一歇，小祥一直在这里陪着你。想多说一点吗？",
    "哇，这个好棒！小祥替主人开心～之后一定要告诉我后续哦！",
    "嗯嗯，小祥记下啦。别太勉强自己，累了就早点休息，好不好？",
    "主人这么说，小祥也有点担心呢。要不要一起想想办法？先说说最让你在意的是哪一点～",
]
CHAT_REPLIES_EN = [
    "Oh no, that sounds like a long day. Take a breath first, I'm right here. Want to tell me more about it?",
    "That's wonderful news! I'm so happy for you, 主人. You have to tell me how it goes, okay?",
    "Hmm, I get why that's on your mind. Don't push yourself too hard tonight; we can figure it out together.",
    "Haha, that's so you! Honestly it made me smile. What are you going to do next?",
]
# One sentence about the first thing the user said in the transcript (the fact it states).
SUMMARY_ZH = "主人和小祥聊到{topic}，小祥认真听着并鼓励了主人。"
SUMMARY_EN = "主人 talked with 小祥 about how {topic}; 小祥 listened and encouraged 主人."
REVIEWER_ANSWER = (
    "This is a lasting detail about 主人 but not something core like a name or a birthday; "
    "it stays an ordinary fact. [KEEP]"
)

_CJK = re.compile(r"[\u4e00-\u9fff]")
_TURN_BLOCK = re.compile(r"<<<TURN[^\n]*\n(?P<body>.*?)\nTURN>>>", re.DOTALL)
_MEMORIES_BLOCK = re.compile(r"<<<MEMORIES[^\n]*\n(?P<body>.*?)\nMEMORIES>>>", re.DOTALL)
_EDITABLE_ID = re.compile(r"^\[(mem_[A-Za-z0-9_-]+)\] (?!\(read-only\))", re.MULTILINE)


@dataclass(frozen=True)
class Line:
    """One scripted user message and the fact it states."""

    text: str
    fact: str


def script(user_index: int, turns: int, small_talk: float = 0.0) -> list[Line]:
    """The user's `turns` messages, deterministic for a given user; each is small talk (`SMALL_TALK`, no fact) with
    the chance `small_talk`."""
    rng = random.Random(SEED + user_index)
    talk = random.Random(SEED - user_index)  # its own draws: the scripted lines come in the same order either way
    lines = []
    for _ in range(turns):
        if talk.random() < small_talk:
            lines.append(Line(talk.choice(SMALL_TALK), ""))
            continue
        message, fact = rng.choice(TEMPLATES)
        slots = templates.slots(rng)
        lines.append(Line(message.format(**slots), fact.format(**slots)))
    return lines


def _words(text: str) -> int:
    """Latin words plus CJK characters / 1.5 (a rough word count for mixed text)."""
    return len(re.findall(r"[A-Za-z0-9']+", text)) + round(len(_CJK.findall(text)) / 1.5)


def _seeded(text: str) -> random.Random:
    return random.Random(zlib.crc32(text.encode()))


# --- the scripted fake LLM ---------------------------------------------------------------------


class Roles:
    """Callable answers per role for the fake server; remembers every completion it gave."""

    def __init__(self, facts: dict[str, str]) -> None:
        self._facts = facts
        self._lock = threading.Lock()
        self.completions: dict[str, list[str]] = {role: [] for role in MODELS}
        self.ops = {"add": 0, "boost": 0, "skip": 0}

    def install(self, fake: FakeOpenAIServer) -> None:
        answers: dict[str, Callable[[dict[str, Any]], str]] = {
            "chat": self.chat,
            "monitor": self._monitor,
            "summarizer": self._summarizer,
            "reviewer": self._reviewer,
        }
        for role, answer in answers.items():
            fake.set_default(MODELS[role], self._recorded(role, answer))

    def _recorded(self, role: str, answer: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
        def reply(body: dict[str, Any]) -> str:
            text = answer(body)
            with self._lock:
                self.completions[role].append(text)
            return text

        return reply

    @staticmethod
    def _last_user(body: dict[str, Any]) -> str:
        return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")

    def chat(self, body: dict[str, Any]) -> str:
        """An in-character reply in the language of the last user message."""
        said = self._last_user(body)
        replies = CHAT_REPLIES_ZH if _CJK.search(said) else CHAT_REPLIES_EN
        return _seeded(said).choice(replies)

    def _monitor(self, body: dict[str, Any]) -> str:
        data = body["messages"][1]["content"]  # [system rules, memories + turn as data]
        turn = _TURN_BLOCK.search(data)
        memories = _MEMORIES_BLOCK.search(data)
        user_text = turn["body"].split("\n")[0].split(": ", 1)[1] if turn else ""
        ids = _EDITABLE_ID.findall(memories["body"]) if memories else []
        rng = _seeded(user_text)
        ops = []
        fact = self._facts.get(user_text)
        if fact and rng.random() < ADD_SHARE:
            ops.append(f"[ADD] {fact}")
        if ids and rng.random() < BOOST_SHARE:
            ops.append(f"[BOOST:{rng.choice(ids[:2])}]")  # the best-ranked memories are the likely used ones
        with self._lock:
            for op in ops:
                self.ops["add" if op.startswith("[ADD]") else "boost"] += 1
            self.ops["skip"] += not ops
        return "\n".join(ops) or "[SKIP]"

    def _summarizer(self, body: dict[str, Any]) -> str:
        transcript = self._last_user(body)
        said = next((line.split(": ", 1)[1] for line in transcript.splitlines() if line.startswith("主人: ")), "")
        topic = self._facts.get(said, "主人's day").rstrip("。.")
        if _CJK.search(said) and not topic.startswith("主人 "):
            return SUMMARY_ZH.format(topic=topic)
        return SUMMARY_EN.format(topic=topic)

    def _reviewer(self, body: dict[str, Any]) -> str:
        return REVIEWER_ANSWER


# --- token accounting ----------------------------------------------------------------------------


def _message_tokens(message: dict[str, Any]) -> int:
    return count_tokens(str(message.get("content") or "")) + MESSAGE_OVERHEAD_TOKENS


def role_tokens(fake: FakeOpenAIServer, roles: Roles, role: str) -> dict[str, int]:
    """Calls, prompt tokens (and of them the system message), completion tokens of one role."""
    requests = fake.requests_for(MODELS[role])
    completions = roles.completions[role]
    if len(completions) != len(requests):
        raise RuntimeError(f"{role}: {len(requests)} requests but {len(completions)} answers recorded")
    prompt = sum(_message_tokens(m) for r in requests for m in r.messages)
    system = sum(_message_tokens(m) for r in requests for m in r.messages if m.get("role") == "system")
    completion = sum(count_tokens(text) for text in completions)
    return {
        "calls": len(requests),
        "prompt": prompt,
        "prompt_system": system,
        "completion": completion,
        "total": prompt + completion,
    }


def token_report(fake: FakeOpenAIServer, roles: Roles, user_turns: int) -> dict[str, Any]:
    per_role = {role: role_tokens(fake, roles, role) for role in (*BACKGROUND_ROLES, "chat")}
    background = {
        key: sum(per_role[role][key] for role in BACKGROUND_ROLES)
        for key in ("calls", "prompt", "prompt_system", "completion", "total")
    }
    summarizer_messages = [
        r.messages[-1]["content"].count("\n") - 3  # transcript lines between the CONVERSATION markers
        for r in fake.requests_for(MODELS["summarizer"])
    ]
    return {
        "user_turns": user_turns,
        "roles": per_role,
        "background": background,
        "background_per_turn": round(background["total"] / user_turns, 1),
        "per_turn": {role: round(per_role[role]["total"] / user_turns, 1) for role in (*BACKGROUND_ROLES, "chat")},
        "chat_prompt_per_turn": round(per_role["chat"]["prompt"] / user_turns, 1),
        "summarized_messages_per_call": round(float(np.mean(summarizer_messages)), 1) if summarizer_messages else 0,
        "monitor_ops": dict(roles.ops),
    }


# --- running one mode ----------------------------------------------------------------------------


def role_settings(data_dir: Path, llm_url: str) -> Settings:
    """An app talking to the fake LLM at `llm_url`, each role with its own model name; no rate limit."""
    return Settings(
        storage={"data_dir": data_dir},
        llm={"base_url": llm_url, **{f"{role}_model": model for role, model in MODELS.items()}},
        rate_limit_per_minute=0,  # simulated users type far faster than people
    )


def _message(user_index: int, text: str) -> IncomingMessage:
    return IncomingMessage(
        conversation=ConversationRef("cli", "", f"bench-bg-{user_index}"),
        user=UserRef("cli", f"bench-bg-user{user_index}"),
        speaker_name=SPEAKERS[user_index % len(SPEAKERS)],
        text=text,
        sent_at=datetime.now(UTC),
    )


async def run_mode(
    mode: str, scripts: Sequence[Sequence[Line]], args: argparse.Namespace, embedder: Embedder
) -> dict[str, Any]:
    """One fresh app: every user's conversation in sequence, timed; then drain and count tokens.

    mode "off": background disabled; "on": the normal app; "paced": the normal app with the fake
    answering at once and the background drained after every turn (tokens only, not timed).
    """
    facts = {line.text: line.fact for lines in scripts for line in lines}
    roles = Roles(facts)
    paced = mode == "paced"
    with FakeOpenAIServer() as fake, tempfile.TemporaryDirectory(prefix=f"bench-background-{mode}-") as tmp:
        roles.install(fake)
        fake.delay = 0.0 if paced else args.delay
        app = await build_app(role_settings(Path(tmp), fake.url), embedder=embedder, background=mode != "off")
        await app.start(schedule=False)
        companion = app.companion
        latencies: list[float] = []
        try:
            print(f"[{mode}] {len(scripts)} users x {args.turns} turns...", file=sys.stderr)
            started = time.perf_counter()
            for user_index, lines in enumerate(scripts):
                for line in lines:
                    start = time.perf_counter_ns()
                    result = await companion.handle(_message(user_index, line.text))
                    reply = await result.text()
                    latencies.append((time.perf_counter_ns() - start) / 1e6)
                    if not result.completed or not reply:
                        raise RuntimeError(f"[{mode}] a turn did not complete: {result.notice}")
                    if paced:
                        await companion.tasks.drain()
                    elif args.think:
                        await asyncio.sleep(args.think)
            turns_s = time.perf_counter() - started
            start = time.perf_counter()
            await companion.tasks.drain()
            drain_s = time.perf_counter() - start
            user_turns = len(latencies)
            tokens = token_report(fake, roles, user_turns)
            memories = _memory_counts(app, len(scripts))
            _check(mode, app, tokens, user_turns)
        finally:
            await app.aclose()
    return {
        "mode": mode,
        "turns_s": round(turns_s, 1),
        "drain_s": round(drain_s, 2),
        "reply_ms": summarize(latencies),
        "tokens": tokens,
        "memories": memories,
    }


def _memory_counts(app: App, users: int) -> dict[str, int]:
    persona = app.companion.persona().id
    counts = {"fact": 0, "core": 0, "episode": 0}
    for user_index in range(users):
        scope = Scope(persona, f"cli:bench-bg-user{user_index}")
        for record in app.companion.knowledge.memories(scope, categories=list(counts)):
            counts[record.category] += 1
    return counts


def _check(mode: str, app: App, tokens: dict[str, Any], user_turns: int) -> None:
    """Every turn reached the chat model once; ON reached the monitor once per turn; nothing left over."""
    roles = tokens["roles"]
    if roles["chat"]["calls"] != user_turns:
        raise RuntimeError(f"[{mode}] {roles['chat']['calls']} chat calls for {user_turns} turns")
    if mode == "off":
        if tokens["background"]["calls"]:
            raise RuntimeError("[off] background roles were called although background work was disabled")
        return
    if roles["monitor"]["calls"] != user_turns:
        raise RuntimeError(f"[{mode}] {roles['monitor']['calls']} monitor calls for {user_turns} turns")
    if app.journal.jobs.pending_jobs() or app.journal.jobs.dead_letters():
        raise RuntimeError(f"[{mode}] jobs left pending or dead-lettered after drain()")


# --- report --------------------------------------------------------------------------------------


def ratios(off: dict[str, Any], on: dict[str, Any]) -> dict[str, float]:
    return {
        "mean": round(on["reply_ms"]["mean"] / off["reply_ms"]["mean"], 3),
        "p50": round(on["reply_ms"]["p50"] / off["reply_ms"]["p50"], 3),
        "p95": round(on["reply_ms"]["p95"] / off["reply_ms"]["p95"], 3),
    }


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def print_report(args: argparse.Namespace, runs: dict[str, dict[str, Any]], ratio: dict[str, float]) -> None:
    off, on = runs["off"], runs["on"]
    print(
        f"background roles: {args.users} users x {args.turns} turns, fake LLM {args.delay * 1000:.0f} ms per "
        f"request, think time {args.think * 1000:.0f} ms"
    )
    print()
    print("1. time to reply (handle() until the stream is consumed), ms")
    print(f"{'':<28}{'p50':>9}{'p95':>9}{'mean':>9}{'max':>9}")
    for label, run in (("OFF (no background jobs)", off), ("ON  (normal app)", on)):
        r = run["reply_ms"]
        print(f"{label:<28}{r['p50']:>9.1f}{r['p95']:>9.1f}{r['mean']:>9.1f}{r['max']:>9.1f}")
    print(
        f"{'ratio ON / OFF':<28}{ratio['p50']:>9.3f}{ratio['p95']:>9.3f}{ratio['mean']:>9.3f}"
        f"   target <= {TARGET_RATIO}: mean {_verdict(ratio['mean'] <= TARGET_RATIO)}, "
        f"p50 {_verdict(ratio['p50'] <= TARGET_RATIO)}"
    )
    print(
        f"turns ran in {off['turns_s']:.1f} s (OFF) / {on['turns_s']:.1f} s (ON); "
        f"ON background backlog drained {on['drain_s']:.1f} s after the last reply"
    )
    print()
    print("2. tokens per user turn (count_tokens; prompt messages + 4 framing tokens each)")
    header = f"{'':<30}{'calls':>7}{'prompt':>9}{'(system)':>10}{'compl.':>8}{'total':>8}{'per turn':>10}"
    for mode, title in (
        ("on", f"timed ON run ({args.think * 1000:.0f} ms think time: background lags, summaries batch)"),
        ("paced", "paced ON run (background drained after every turn: human pacing)"),
    ):
        if mode not in runs:
            continue
        tokens = runs[mode]["tokens"]
        turns = tokens["user_turns"]
        print(f"-- {title}")
        print(header)
        for role in (*BACKGROUND_ROLES, "chat"):
            t = tokens["roles"][role]
            label = role if role != "chat" else "(chat, for context)"
            if role == "chat":
                b = tokens["background"]
                print(
                    f"{'BACKGROUND total':<30}{b['calls']:>7}{b['prompt'] / turns:>9.1f}"
                    f"{b['prompt_system'] / turns:>10.1f}{b['completion'] / turns:>8.1f}"
                    f"{b['total'] / turns:>8.1f}{tokens['background_per_turn']:>10.1f}"
                    f"   target <= {TARGET_TOKENS_PER_TURN}: "
                    f"{_verdict(tokens['background_per_turn'] <= TARGET_TOKENS_PER_TURN)}"
                )
            print(
                f"{label:<30}{t['calls']:>7}{t['prompt'] / turns:>9.1f}{t['prompt_system'] / turns:>10.1f}"
                f"{t['completion'] / turns:>8.1f}{t['total'] / turns:>8.1f}{tokens['per_turn'][role]:>10.1f}"
            )
        ops = tokens["monitor_ops"]
        memories = runs[mode]["memories"]
        print(
            f"   (token columns are per user turn; calls are totals)  monitor answers: {ops['add']} ADD, "
            f"{ops['boost']} BOOST, {ops['skip']} SKIP; summarizer: {tokens['summarized_messages_per_call']} "
            f"messages per call; stored: {memories['fact']} facts, {memories['episode']} episodes, "
            f"{memories['core']} core"
        )
    off_chat = off["tokens"]["chat_prompt_per_turn"]
    print(f"-- chat prompt tokens per turn with background OFF (no memories ever stored): {off_chat:.1f}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.background", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=100, help="turns per user (default 100)")
    parser.add_argument("--users", type=int, default=3, help="users, one after another (default 3)")
    parser.add_argument("--think", type=float, default=0.05, help="seconds between a reply and the next message")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the fake LLM takes per request")
    parser.add_argument("--no-paced", dest="paced", action="store_false", help="skip the paced token run")
    parser.add_argument("--json", action="store_true", help="print one JSON line with every figure at the end")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.users < 1 or args.think < 0 or args.delay < 0:
        parser.error("turns and users must be positive, think and delay not negative")
    return args


async def run(args: argparse.Namespace, embedder: Embedder) -> dict[str, dict[str, Any]]:
    scripts = [script(user_index, args.turns) for user_index in range(args.users)]
    modes = ["off", "on"] + (["paced"] if args.paced else [])
    return {mode: await run_mode(mode, scripts, args, embedder) for mode in modes}


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    embedder = load_embedder(MemorySettings.model_fields["embedder"].default)
    embedder.embed_queries(["warm-up"])  # the first inference of a session is slow: keep it out of OFF
    embedder.embed_passages(["warm-up"])
    runs = asyncio.run(run(args, embedder))
    runtime = time.perf_counter() - started
    ratio = ratios(runs["off"], runs["on"])
    print_report(args, runs, ratio)
    words = [_words(line.text) for user in range(args.users) for line in script(user, args.turns)]
    print(f"user messages: {min(words)}-{max(words)} words (mean {np.mean(words):.1f}); embedder {embedder.name}")
    print(f"total runtime {runtime:.1f} s")
    if args.json:
        report = {
            "benchmark": "background",
            "users": args.users,
            "turns": args.turns,
            "think_s": args.think,
            "llm_delay_s": args.delay,
            "embedder": embedder.name,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "runtime_s": round(runtime, 1),
            "reply_ratio": ratio,
            "targets": {"reply_ratio": TARGET_RATIO, "background_tokens_per_turn": TARGET_TOKENS_PER_TURN},
            "runs": runs,
        }
        print(json.dumps(report, ensure_ascii=False))


if __name__ == "__main__":
    main()
