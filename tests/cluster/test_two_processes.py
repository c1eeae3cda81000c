"""Two bot processes sharing one PostgreSQL database and one Chroma server behave as one companion.

Each app here has its own connections, pools, data directory and in-memory snapshots, as a process
(on this machine or another) would; nothing is shared between them but the two servers.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from bot.app import App, build_app
from bot.cli.main import cli
from bot.config import Settings
from bot.ordering import TurnOrder
from bot.startup import StartupError
from core.background.scheduler import DECAY_JOB
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from tests.cluster.conftest import OpenApp
from tests.fakes.clock import FakeClock
from tests.fakes.crash import CrashAt
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT, MONITOR, Person, chat_history, monitor_rules, prompt_sections, wait_until

ALICE = Scope("xiaoxiang", "cli:alice")
CONVERSATION = "telegram:chat:7"


async def turn(app: App, order: TurnOrder, clock: FakeClock, text: str) -> str:
    """One turn as an adapter runs it: in the conversation's order, the reply consumed to its end."""
    alice = Person(app.companion, clock, conversation_id=CONVERSATION)
    async with order.turn(CONVERSATION):
        return await alice.say(text)


async def test_one_users_turns_stay_in_order_when_two_processes_receive_them(
    open_app: OpenApp, fake_openai: FakeOpenAIServer, clock: FakeClock
) -> None:
    first, second = await open_app("a"), await open_app("b")
    fake_openai.script(CHAT, "Reply one.", "Reply two.")
    fake_openai.set_delay(CHAT, 0.3)  # the first turn is still being answered when the second arrives
    one = asyncio.create_task(turn(first, first.turn_order(), clock, "Message one"))
    await wait_until(lambda: len(fake_openai.requests_for(CHAT)) == 1)
    two = asyncio.create_task(turn(second, second.turn_order(), clock, "Message two"))
    assert await one == "Reply one." and await two == "Reply two."

    # the second process answered only once the first turn was over, and saw all of it
    assert chat_history(fake_openai.requests_for(CHAT)[1])[-3:] == ["Message one", "Reply one.", "Message two"]
    window = second.working_memory.window("xiaoxiang", CONVERSATION)
    assert [message.content for message in window] == ["Message one", "Reply one.", "Message two", "Reply two."]


async def test_a_job_killed_mid_run_is_retried_once_elsewhere_and_applied_once(
    open_app: OpenApp, fake_openai: FakeOpenAIServer, clock: FakeClock
) -> None:
    fake_openai.set_default(CHAT, "Noted!")
    fake_openai.set_default(
        MONITOR, monitor_rules({"Kai": "[ADD] Alice's best friend Kai visits every summer\n[ADD] Alice's cat is Mochi"})
    )
    crash = CrashAt("model: effect 1 of 2 written")
    dying, surviving = await open_app("a", crash_point=crash), await open_app("b")
    await Person(dying.companion, clock).say("My best friend Kai visits every summer, and my cat is Mochi.")
    await dying.companion.tasks.drain()
    assert crash.passed[-1] == "model: effect 1 of 2 written"  # died between its two writes
    assert len(surviving.companion.knowledge.memories(ALICE)) == 1

    assert surviving.companion.tasks.resume() == 1  # the other process takes the job over
    await surviving.companion.tasks.drain()
    assert sorted(record.content for record in surviving.companion.knowledge.memories(ALICE)) == [
        "Alice's best friend Kai visits every summer",
        "Alice's cat is Mochi",
    ]
    assert len(fake_openai.requests_for(MONITOR)) == 1  # the plan was kept: the model is not asked again
    assert surviving.journal.jobs.pending_jobs() == [] and surviving.journal.jobs.dead_letters() == []
    assert dying.companion.tasks.resume() == 0  # nothing is left for anyone to run twice


async def test_a_forget_through_one_process_is_obeyed_by_the_others_next_prompt(
    open_app: OpenApp, fake_openai: FakeOpenAIServer, clock: FakeClock
) -> None:
    fake_openai.set_default(CHAT, "Noted!")
    first, second = await open_app("a"), await open_app("b")
    first.companion.knowledge.add(ALICE, "Alice's locker code is LOCK-9913", category="fact", source="user")
    await Person(first.companion, clock).say("my locker code is LOCK-9913")
    await first.companion.tasks.drain()
    # the second process has the scope's memories and messages in its snapshots
    assert [hit.record.content for hit in second.companion.knowledge.search(ALICE, "locker code")] == [
        "Alice's locker code is LOCK-9913"
    ]
    assert second.history.search(ALICE, "locker code")

    await first.companion.forgetting.everything(ALICE)

    await Person(second.companion, clock).say("what is my locker code?")
    _, retrieved = prompt_sections(fake_openai.requests_for(CHAT)[-1])
    assert "9913" not in "\n".join(chat_history(fake_openai.requests_for(CHAT)[-1])) + retrieved
    assert second.companion.knowledge.search(ALICE, "locker code") == []
    assert not [hit for hit in second.history.search(ALICE, "locker code") if "9913" in hit.message.content]


async def test_a_job_running_in_one_process_cannot_write_back_what_another_forgot(
    open_app: OpenApp, fake_openai: FakeOpenAIServer, clock: FakeClock
) -> None:
    fake_openai.set_default(CHAT, "Noted!")
    fake_openai.set_default(MONITOR, "[ADD] Alice's passport number is ZQX-4471")
    fake_openai.set_delay(MONITOR, 0.5)  # the forget lands while the monitor is thinking
    first, second = await open_app("a"), await open_app("b")
    await Person(first.companion, clock).say("my passport number is ZQX-4471")
    await wait_until(lambda: len(fake_openai.requests_for(MONITOR)) == 1)

    await second.companion.forgetting.everything(ALICE)
    await first.companion.tasks.drain()

    assert first.companion.knowledge.memories(ALICE) == [] and second.companion.knowledge.memories(ALICE) == []
    assert second.journal.jobs.pending_jobs() == [] and second.journal.changes.changes(ALICE) == []


async def test_the_decay_pass_runs_once_when_both_schedulers_fire(
    open_app: OpenApp, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = await open_app("a"), await open_app("b")
    for app in (first, second):
        await app.start(schedule=True)
    schedulers = [app.scheduler for app in (first, second) if app.scheduler is not None]
    caplog.set_level(logging.INFO, logger="core.background.lifecycle")

    def passes() -> int:
        return sum(record.getMessage().startswith("decay pass:") for record in caplog.records)

    await asyncio.gather(*(scheduler.fire(DECAY_JOB) for scheduler in schedulers))
    assert passes() == 1
    clock.advance(days=1)  # the next day's firing runs again, once
    await asyncio.gather(*(scheduler.fire(DECAY_JOB) for scheduler in reversed(schedulers)))
    assert passes() == 2


async def test_a_process_that_died_is_told_from_one_that_runs(open_app: OpenApp) -> None:
    first, second = await open_app("a"), await open_app("b")
    assert first.storage.cluster.alive(second.storage.cluster.worker_id)
    assert not first.storage.cluster.alive("worker_gone")


async def test_the_operator_cli_acts_on_the_shared_stores_while_bots_run(
    open_app: OpenApp, server_settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bot = await open_app("bot")
    written = bot.companion.knowledge.add(ALICE, "Alice's locker code is LOCK-9913", category="fact", source="user")
    assert bot.companion.knowledge.search(ALICE, "locker code")  # in the running bot's snapshot
    assert server_settings.storage.database_url is not None
    monkeypatch.setenv("COMPANION_DATABASE_URL", server_settings.storage.database_url.get_secret_value())
    monkeypatch.setenv("COMPANION_CHROMA_HOST", "127.0.0.1")
    monkeypatch.setenv("COMPANION_CHROMA_PORT", str(server_settings.storage.chroma_port))
    monkeypatch.setenv("COMPANION_DATA_DIR", str(tmp_path / "operator"))  # another machine, maybe

    command = ["memory", "forget", "--persona", "xiaoxiang", "--user", "alice", written.id]
    done = await asyncio.to_thread(CliRunner().invoke, cli, command)
    assert done.exit_code == 0, done.output
    assert bot.companion.knowledge.search(ALICE, "locker code") == []  # the bot's next search
    # no process owns a server-mode store: no lock was taken, no control socket listened
    assert not (tmp_path / "operator" / "companion.lock").exists()
    assert not (tmp_path / "bot" / "control.sock").exists()


async def test_a_process_that_fails_to_start_leaves_no_connection_behind(
    server_settings: Settings, database_url: str, clock: FakeClock, embedder: Embedder
) -> None:
    """Its connection holding its life lock above all: while that lasts, the others take it for alive."""

    def others_connected() -> int:
        with psycopg.connect(database_url) as connection:
            query = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            [(count,)] = connection.execute(query).fetchall()
        return int(count)

    with pytest.raises(StartupError, match="nobody"):  # found missing at the end, once every part is open
        await build_app(server_settings.changed(default_persona="nobody"), clock=clock, embedder=embedder)
    await wait_until(lambda: others_connected() == 0)  # the server notices the connections ended
