"""Benchmark of the check-in planning pass over many users, and the model calls it leads to.

What is measured:

* the real app (`build_app`: SQLite journal and settings, embedded chromadb, the job queue, the
  fake OpenAI server over HTTP for the chat model) on a fake clock, in a temporary directory;
* N users (default 100,000), every one of them with a private conversation (a contact row) and
  check-ins turned on, so consent never filters anyone out before the rules do;
* 1% of them due: 70% of those have a plan that ended three hours ago, 30% were active on three days
  and then silent for 4 days and a few hours. Everyone else is not due: they wrote in the last three
  days; 10% of them also have a dated memory that is not due (a plan next month, a birthday on
  another day) and 10% an undated fact, so the store holds memories the pass must not read;
* vectors come from `bench.decay.RandomUnitEmbedder` (the pass never reads embeddings);
* the planning pass (`CheckIns.plan`) is timed once with nothing due yet (the cost of finding that
  out), then at the moment the 1% are due; then the jobs it started run, with an outbox that
  accepts everything, and the chat model's calls are counted: exactly one per due check-in.

Run from the repository root::

    python -m bench.checkins                 # 100,000 users, 1% due
    python -m bench.checkins --users 10000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.decay import RandomUnitEmbedder
from bot.app import App, build_app
from bot.config import Settings
from core.checkins import PlanReport
from knowledge.records import MemoryRecord, Scope, new_memory_id
from knowledge.sql.database import iso
from knowledge.sql.sqlite import SQLiteDatabase
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer

SEED = 20260105
NOW = datetime(2026, 1, 5, 13, 0, tzinfo=UTC)  # a Monday afternoon, in UTC (every user's zone here)
PERSONA = "xiaoxiang"
BATCH = 10_000


class AcceptingOutbox:
    """Takes every check-in, as a platform that delivers at once would."""

    def __init__(self) -> None:
        self.sent = 0

    def reaches(self, user_id: str) -> bool:
        return True

    async def deliver(self, user_id: str, conversation_id: str, text: str) -> None:
        self.sent += 1


def cpu_model() -> str:
    """The CPU's model name, as lscpu says it."""
    try:
        found = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return next((line.split(":", 1)[1].strip() for line in found.splitlines() if line.startswith("Model name")), "?")


def _memory(scope: Scope, content: str, category: str, created: datetime, about: datetime | None) -> MemoryRecord:
    return MemoryRecord(
        id=new_memory_id(),
        scope=scope,
        content=content,
        category=category,  # type: ignore[arg-type]
        importance=1.0,
        created_at=created,
        last_access=created,
        source="user",
        about=about,
    )


def seed(app: App, database: Path, users: int, due_share: float) -> tuple[int, int]:
    """Fill the stores; returns how many plans and how many silences are due at NOW."""
    rng = random.Random(SEED)
    scopes = [Scope(PERSONA, f"telegram:{number}") for number in range(1, users + 1)]
    due = int(users * due_share)
    plans, silences = scopes[: int(due * 0.7)], scopes[int(due * 0.7) : due]
    db = SQLiteDatabase(database)
    contacts, settings, messages, records = [], [], [], []
    for index, scope in enumerate(scopes):
        if scope in silences:
            last = NOW - timedelta(days=4, hours=rng.uniform(1, 6))
            for day in range(3):  # active on three days before the silence
                sent = last - timedelta(days=day)
                messages.append((f"msg_b{index}_{day}", scope, sent))
        else:
            last = NOW - timedelta(hours=rng.uniform(1, 72))
        contacts.append((scope.persona_id, scope.user_id, f"telegram:chat:{scope.user_id[9:]}", iso(last), 0, ""))
        settings.append((scope.persona_id, scope.user_id, 1))
        if index < len(plans):
            ended = NOW - timedelta(hours=3)
            records.append(_memory(scope, "has an interview", "fact", NOW - timedelta(days=2), ended))
        elif index >= due and index % 10 == 0:
            about = NOW + timedelta(days=rng.uniform(3, 40))
            records.append(_memory(scope, "has a plan next month", "fact", NOW - timedelta(days=1), about))
        elif index >= due and index % 10 == 1:
            birthday = datetime(1990, 1 + index % 12, 10 + index % 15, tzinfo=UTC)  # never 5 January
            records.append(_memory(scope, "birthday", "core", NOW - timedelta(days=30), birthday))
        elif index >= due and index % 10 == 2:
            records.append(_memory(scope, "likes ramen", "fact", NOW - timedelta(days=5), None))
    with db.transaction() as tx:
        tx.executemany(
            "INSERT INTO checkin_contacts (persona_id, user_id, conversation_id, last_user_at, unanswered,"
            " off_reason) VALUES (?, ?, ?, ?, ?, ?)",
            contacts,
        )
        tx.executemany("INSERT INTO user_settings (persona_id, user_id, checkins) VALUES (?, ?, ?)", settings)
        tx.executemany(
            "INSERT INTO messages (id, persona_id, conversation_id, user_id, role, speaker_name, content, sent_at,"
            " state) VALUES (?, ?, ?, ?, 'user', 'someone', 'hi', ?, 'summarized')",
            [
                (id_, scope.persona_id, f"telegram:chat:{scope.user_id[9:]}", scope.user_id, iso(sent))
                for id_, scope, sent in messages
            ],
        )
    db.close()
    for start in range(0, len(records), BATCH):
        app.companion.knowledge.add_records(records[start : start + BATCH])  # type: ignore[attr-defined]
    return len(plans), len(silences)


async def measure(app: App, clock: FakeClock, fake: FakeOpenAIServer) -> dict[str, object]:
    """Time the pass with nothing due, then with the 1% due, then run what it started."""
    checkins = app.companion.checkins
    clock_now = clock.now()
    clock.advance(seconds=(NOW - timedelta(days=3) - clock_now).total_seconds())  # three days before: none due
    started = time.perf_counter()
    idle: PlanReport = await checkins.plan()
    idle_seconds = time.perf_counter() - started
    clock.advance(seconds=(NOW - clock.now()).total_seconds())
    outbox = AcceptingOutbox()
    calls_before = len(fake.requests_for("chat-model"))
    started = time.perf_counter()
    report = await checkins.plan()  # plans and dispatches: no outbox yet, so nothing starts
    plan_seconds = time.perf_counter() - started
    calls_planning = len(fake.requests_for("chat-model")) - calls_before
    checkins.add_outbox(outbox)
    started = time.perf_counter()
    dispatched = checkins.dispatch()
    await app.companion.tasks.drain()
    send_seconds = time.perf_counter() - started
    return {
        "nothing_due_seconds": round(idle_seconds, 3),
        "nothing_due_planned": idle.planned,
        "plan_seconds": round(plan_seconds, 3),
        "candidates": report.candidates,
        "planned": report.planned,
        "llm_calls_while_planning": calls_planning,
        "dispatched": dispatched,
        "sent": outbox.sent,
        "llm_calls": len(fake.requests_for("chat-model")) - calls_before,
        "send_seconds": round(send_seconds, 2),
    }


def run(users: int, due_share: float) -> dict[str, object]:
    """Build the app in a temporary directory, seed it and measure."""
    with tempfile.TemporaryDirectory(prefix="companion-bench-checkins-") as tmp, FakeOpenAIServer() as fake:
        fake.set_default("chat-model", "How did it go?")
        settings = Settings(
            storage={"data_dir": Path(tmp)},
            llm={"base_url": fake.url, "chat_model": "chat-model", "timeout": 10},
            timezone="UTC",
        )
        clock = FakeClock(NOW - timedelta(days=10))

        async def measured() -> dict[str, object]:
            async with await build_app(
                settings, clock=clock, embedder=RandomUnitEmbedder(), accept_empty_memory=True
            ) as app:
                started = time.perf_counter()
                plans, silences = seed(app, Path(tmp) / "companion.sqlite3", users, due_share)
                figures: dict[str, object] = {"users": users, "due_plans": plans, "due_silences": silences}
                figures["seed_seconds"] = round(time.perf_counter() - started, 1)
                return {**figures, **await measure(app, clock, fake)}

        return asyncio.run(measured())


def main() -> None:
    """Parse arguments, run the bench and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.checkins", description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=100_000, help="users with a private chat (default 100000)")
    parser.add_argument("--due", type=float, default=0.01, help="share of them due (default 0.01)")
    parser.add_argument("--json", action="store_true", help="also print one JSON line with every figure")
    args = parser.parse_args()
    figures = run(args.users, args.due)
    due = int(figures["due_plans"]) + int(figures["due_silences"])  # type: ignore[call-overload]
    print(f"CPU: {cpu_model()}")
    print(
        f"seeded {args.users:,} users ({due:,} due: {figures['due_plans']} plans, {figures['due_silences']} "
        f"silences) in {figures['seed_seconds']} s"
    )
    print(f"planning pass, nothing due:  {figures['nothing_due_seconds']:.3f} s, {figures['nothing_due_planned']} new")
    print(
        f"planning pass, 1% due:       {figures['plan_seconds']:.3f} s ({float(figures['plan_seconds']) / 2.0:.0%} of"  # type: ignore[arg-type]
        " the 2 s"
        f" target), {figures['planned']} planned of {figures['candidates']} candidates,"
        f" {figures['llm_calls_while_planning']} model calls"
    )
    print(
        f"carrying them out:           {figures['send_seconds']:.1f} s, {figures['sent']} sent,"
        f" {figures['llm_calls']} chat-model calls ({int(figures['llm_calls']) / max(due, 1):.2f} per due check-in)"  # type: ignore[call-overload]
    )
    if args.json:
        print(json.dumps({"cpu": cpu_model(), **figures}))


if __name__ == "__main__":
    main()
