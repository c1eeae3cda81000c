"""The composition root."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bot.app import WORKER_THREADS, App, build_app, model_settings
from bot.config import LLMSettings, Settings
from bot.startup import StartupError
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT, MONITOR, Body

ROOT = Path(__file__).resolve().parents[2]


def test_with_an_endpoint_the_embedded_model_is_never_imported() -> None:
    code = (
        "import sys; from bot.config import load_settings; from bot.app import build_llm; "
        "build_llm(load_settings().llm); assert 'llama_cpp' not in sys.modules, 'llama_cpp was imported'"
    )
    env = {**os.environ, "COMPANION_LLM_BASE_URL": "http://127.0.0.1:8080/v1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_background_roles_default_to_the_chat_model_and_can_each_be_set() -> None:
    base = LLMSettings(base_url="http://127.0.0.1:1/v1", chat_model="big")
    assert {settings.model for settings in model_settings(base).values()} == {"big"}
    split = LLMSettings(
        base_url="http://127.0.0.1:1/v1",
        chat_model="big",
        monitor_model="cheap-monitor",
        summarizer_model="cheap-summary",
        reviewer_model="careful-review",
    )
    assert {role: settings.model for role, settings in model_settings(split).items()} == {
        "chat": "big",
        "monitor": "cheap-monitor",
        "summarizer": "cheap-summary",
        "reviewer": "careful-review",
    }


async def test_quiet_conversations_are_summarised_at_shutdown_and_at_start(
    settings: Settings, clock: FakeClock, embedder: Embedder, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.set_default("summarizer-model", "聊了晚饭吃什么。")
    alice, bob = Scope("xiaoxiang", "cli:alice"), Scope("xiaoxiang", "cli:bob")
    app = await build_app(settings, clock=clock, embedder=embedder, backoff=(0.01,))
    await app.start(schedule=True)

    async def say(text: str, scope: Scope) -> None:
        await (await app.companion.handle(make_message(text, user_id=scope.user_id, sent_at=clock.now()))).text()

    for text in ("what's for dinner?", "noodles again?", "or dumplings"):  # enough for an episode
        await say(text, alice)
    clock.advance(minutes=31)
    for text in ("hi!", "are you there?", "I have news"):
        await say(text, bob)
    await app.aclose()  # alice's conversation is idle: summarised now; bob's just spoke: kept
    restarted = await build_app(settings, clock=clock, embedder=embedder)
    try:
        assert [r.category for r in restarted.companion.knowledge.memories(alice)] == ["episode"]
        assert restarted.companion.knowledge.memories(bob) == []
        assert len(restarted.working_memory.window("xiaoxiang", f"dm:{bob.user_id}")) == 6

        clock.advance(minutes=31)  # bob's conversation goes quiet while the bot is down
        await restarted.start(schedule=True)
        await restarted.companion.tasks.drain()
        assert [r.category for r in restarted.companion.knowledge.memories(bob)] == ["episode"]
    finally:
        await restarted.aclose()


async def test_messages_held_while_storage_failed_are_stored_by_the_idle_pass_without_waiting_for_a_turn(
    settings: Settings, clock: FakeClock, embedder: Embedder
) -> None:
    from core.background.scheduler import IDLE_JOB

    app = await build_app(settings, clock=clock, embedder=embedder)
    alice = Scope("xiaoxiang", "cli:alice")
    app.companion.unsaved.hold("xiaoxiang", alice, make_message("said while the disk was full"), group=False)
    await app.start()
    try:
        assert app.scheduler is not None
        await app.scheduler.fire(IDLE_JOB)
        assert len(app.companion.unsaved) == 0
        assert [message.content for message in app.history.messages(alice)] == ["said while the disk was full"]
    finally:
        await app.aclose()


async def test_the_idle_pass_warns_once_when_background_work_waits_past_the_configured_age(
    settings: Settings, clock: FakeClock, embedder: Embedder, alice: Scope, caplog: pytest.LogCaptureFixture
) -> None:
    from core.background.scheduler import IDLE_JOB

    settings = settings.changed(memory={"backlog_warning_minutes": 15})
    app = await build_app(settings, clock=clock, embedder=embedder)
    await app.start()
    try:
        assert app.scheduler is not None
        app.journal.jobs.enqueue("monitor", alice, {}, at=clock.now(), held_by="a process still busy")
        clock.advance(minutes=16)
        await app.scheduler.fire(IDLE_JOB)
        clock.advance(minutes=5)
        await app.scheduler.fire(IDLE_JOB)
        said = [record.getMessage() for record in caplog.records if "background memory work" in record.getMessage()]
        assert len(said) == 1 and "1 jobs wait, the oldest for 16.0 min (warning past 15.0 min)" in said[0]
    finally:
        await app.aclose()


def files_held_open(directory: Path) -> list[Path]:
    """The files under `directory` this process has open (Linux: the links in /proc/self/fd)."""
    held = []
    for descriptor in Path("/proc/self/fd").iterdir():
        try:
            target = Path(os.readlink(descriptor))
        except OSError:  # closed meanwhile, or the descriptor of the listing itself
            continue
        if target.is_relative_to(directory):
            held.append(target)
    return held


def held_after_closing(directory: Path, *, within: float = 5.0) -> list[Path]:
    """The files under `directory` still open once chromadb's engine had `within` seconds to let go: it closes its
    SQLite file on a thread of its own, a moment after `close()` returned."""
    deadline = time.monotonic() + within
    while (held := files_held_open(directory)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return held


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="open files are read from /proc")
async def test_a_start_refused_half_way_closes_what_it_had_opened(
    settings: Settings, clock: FakeClock, embedder: Embedder, alice: Scope
) -> None:
    data_dir = settings.storage.data_dir
    async with await build_app(settings, clock=clock, embedder=embedder) as app:
        app.companion.knowledge.add(alice, "Alice keeps bees", category="fact", source="user")
        assert {path.name for path in files_held_open(data_dir)} >= {"companion.sqlite3", "chroma.sqlite3"}
    assert held_after_closing(data_dir) == []

    shutil.rmtree(data_dir / "chroma")  # the memories are lost: the start stops after the SQL stores and chromadb
    with pytest.raises(StartupError, match="memory store is missing"):
        await build_app(settings, clock=clock, embedder=embedder)
    assert held_after_closing(data_dir) == []


async def test_background_work_running_at_shutdown_still_has_the_model_and_the_stores(
    settings: Settings, clock: FakeClock, embedder: Embedder, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    answer = threading.Event()

    def monitor(body: Body) -> str:
        answer.wait(30)  # still thinking when the app begins to close
        return "[ADD] Alice keeps bees"

    fake_openai.set_default(MONITOR, monitor)
    fake_openai.set_default(CHAT, "Bees!")
    app = await build_app(settings, clock=clock, embedder=embedder)
    await (await app.companion.handle(make_message("I keep bees", user_id=alice.user_id))).text()
    answer.set()
    await app.aclose()  # the job ends within the grace period, before the model and the stores close

    async with await build_app(settings, clock=clock, embedder=embedder) as restarted:
        assert [memory.content for memory in restarted.companion.knowledge.memories(alice)] == ["Alice keeps bees"]
        assert restarted.journal.jobs.pending_jobs() == [] and restarted.journal.jobs.dead_letters() == []


async def test_work_sent_to_threads_does_not_queue_behind_work_that_waits(app: App) -> None:
    # Searches waiting for their query's embedding once held every thread of asyncio's default pool (cores + 4),
    # and the rest of every turn's work queued behind them: the app's pool lets dozens wait at once.
    waiting = threading.Barrier(WORKER_THREADS // 2, timeout=10)  # each call waits until all of them have started
    await asyncio.gather(*(asyncio.to_thread(waiting.wait) for _ in range(WORKER_THREADS // 2)))
    assert WORKER_THREADS // 2 > (os.cpu_count() or 1) + 4
