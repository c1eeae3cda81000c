"""The `companion` command: scripted chat, memory inspection, settings and clear errors."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from bot.app import App, build_app
from bot.cli.doctor import check_privacy
from bot.cli.main import cli
from bot.config import load_settings, settings_table
from bot.platforms.terminal import HELP_TEXT
from core import phrasebook
from core.checkins import PlanReport
from knowledge.journal.change_log import LoggedChange
from knowledge.journal.journal import Journal
from knowledge.records import MemoryRecord, Scope
from tests.fakes.clock import FakeClock
from tests.fakes.earlier_run import earlier_run
from tests.fakes.openai_server import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[3]


def test_piped_chat_answers_each_line_and_handles_commands(
    runner: CliRunner, fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPANION_TIMEZONE", "Asia/Shanghai")
    fake_openai.script("chat-model", "Hi Alice!", "Ramen, of course.")
    lines_in = (
        "hello\nwhat should I eat?\n/memory\n/timezone Mars/Base\n/timezone berlin\n/share on\n/share\n/share off\n"
        "/bogus\n"
    )
    result = runner.invoke(cli, ["chat", "--user", "alice"], input=lines_in)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # the clock is the real one: the local time of day in the answers is checked by pattern
    assert re.fullmatch(
        r"Your time zone is Asia/Shanghai, the default here: it is \d\d:\d\d on \w+ for you\. .+", lines[4]
    )
    assert re.fullmatch(r"Okay: your time zone is now Europe/Berlin, where it is \d\d:\d\d on \w+\.", lines[7])
    del lines[7], lines[4]
    assert lines == [
        "Hi Alice!",
        "Ramen, of course.",
        "I don't remember anything about you yet.",
        "",
        phrasebook.checkins_status(False),
        phrasebook.unknown_time_zone("Mars/Base"),
        phrasebook.sharing_switched(True),
        phrasebook.sharing_status(True),
        phrasebook.sharing_switched(False),
        *f"I don't know the command /bogus.\n\n{HELP_TEXT}".splitlines(),
    ]


def test_quit_stops_reading(runner: CliRunner, fake_openai: FakeOpenAIServer) -> None:
    result = runner.invoke(cli, ["chat", "--user", "alice"], input="/quit\nhello\n")
    assert result.exit_code == 0
    assert fake_openai.requests_for("chat-model") == []


def test_forget_asks_first_then_deletes(runner: CliRunner, fake_openai: FakeOpenAIServer) -> None:
    result = runner.invoke(cli, ["chat", "--user", "alice"], input="I love cats\n/forget\nno\n/forget\nyes\n")
    assert result.exit_code == 0, result.output
    assert "Okay, I won't forget anything." in result.output
    assert "Done. I forgot 0 memories and 2 messages about you." in result.output


def test_forget_what_shows_the_matches_then_deletes_only_them(runner: CliRunner) -> None:
    alice, bob = Scope("xiaoxiang", "cli:alice"), Scope("xiaoxiang", "cli:bob")

    def remember(app: App) -> None:
        kb = app.companion.knowledge
        kb.add(alice, "Alice's ex is called Tom", category="fact", source="user")
        kb.add(alice, "Alice loves ramen", category="fact", source="user")
        kb.add(bob, "Bob's brother is called Tom", category="fact", source="user")

    earlier_run(remember)

    declined = runner.invoke(cli, ["chat", "--user", "alice"], input="/forget Tom\nno\n")
    assert "I remember this:\n- Alice's ex is called Tom\n" in declined.output
    assert "Bob" not in declined.output and "Okay, I won't forget anything." in declined.output
    confirmed = runner.invoke(cli, ["chat", "--user", "alice"], input="/forget Tom\nyes\n/forget spiders\n")
    assert "Done. I forgot 1 memory." in confirmed.output
    assert "I don't remember anything about 'spiders'." in confirmed.output

    def remembered(app: App) -> tuple[list[str], list[str], list[LoggedChange]]:
        kept = [[record.content for record in app.companion.knowledge.memories(scope)] for scope in (alice, bob)]
        return kept[0], kept[1], app.journal.changes.changes(alice)

    of_alice, of_bob, [entry] = earlier_run(remembered)
    assert (of_alice, of_bob) == (["Alice loves ramen"], ["Bob's brother is called Tom"])
    assert (entry.action, entry.actor, entry.old_content) == ("delete", "user", None)


def test_memory_list_prints_one_scope_as_json(runner: CliRunner) -> None:

    def remember(app: App) -> None:
        kb = app.companion.knowledge
        kb.add(Scope("xiaoxiang", "cli:alice"), "Alice loves ramen", category="fact", source="user", topic="preference")
        kb.add(Scope("xiaoxiang", "cli:bob"), "Bob loves jazz", category="fact", source="user")

    earlier_run(remember)

    result = runner.invoke(cli, ["memory", "list", "--persona", "xiaoxiang", "--user", "alice", "--json"])
    assert result.exit_code == 0, result.output
    [record] = json.loads(result.output)
    assert record["content"] == "Alice loves ramen"
    assert record["user_id"] == "cli:alice"
    assert {"importance", "category", "created_at", "last_access", "source", "verified", "topic"} <= set(record)


def test_help_lists_every_setting() -> None:
    output = CliRunner().invoke(cli, ["--help"]).output
    for name in ("COMPANION_DATA_DIR", "COMPANION_LLM_BASE_URL", "COMPANION_CHAT_MODEL", "COMPANION_CHROMA_HOST"):
        assert name in output
    for setting in settings_table():
        names = (setting.env, *setting.also, *setting.formerly) if setting.env else (f"[{setting.path[0]}]",)
        assert all(name in output for name in names), setting


def test_no_command_says_it_changes_memories_and_that_nothing_is_changed() -> None:
    def commands(group: click.Group, path: list[str]) -> Iterator[list[str]]:
        for name, command in group.commands.items():
            yield [*path, name]
            if isinstance(command, click.Group):
                yield from commands(command, [*path, name])

    for path in commands(cli, []):
        shown = " ".join(CliRunner().invoke(cli, [*path, "--help"]).output.split())
        assert not ("Nothing is changed" in shown and "changes memories" in shown), path


def test_privacy_check_reports_for_the_default_persona_unless_told_another(runner: CliRunner) -> None:
    checked = runner.invoke(cli, ["privacy-check", "--user", "alice", "QX-5521"])
    assert checked.exit_code == 0, checked.output
    assert checked.output.startswith("privacy check for xiaoxiang/cli:alice in ")


def test_an_unwritable_data_directory_is_a_clear_error(runner: CliRunner, tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a directory should be")
    result = runner.invoke(cli, ["--data-dir", str(blocked / "data"), "chat"], input="hi\n")
    assert result.exit_code == 1
    assert "is not writable" in result.output and "COMPANION_DATA_DIR" in result.output


def test_an_unknown_persona_is_a_clear_error(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["chat", "--persona", "nobody"], input="hi\n")
    assert result.exit_code == 1
    assert "unknown persona 'nobody' (known: xiaoxiang)" in result.output


def test_the_config_file_sets_values_and_refuses_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "companion.toml"
    config.write_text('[llm]\nchat_model = "from-file"\nmonitor_model = "cheap"\n')
    monkeypatch.setenv("COMPANION_CONFIG", str(config))
    monkeypatch.setenv("COMPANION_MONITOR_MODEL", "from-env")
    settings = load_settings()
    assert (settings.llm.chat_model, settings.llm.monitor_model) == ("from-file", "from-env")

    config.write_text('[llm]\napi_key = "sk-leaked"\n')
    result = CliRunner().invoke(cli, ["chat"], input="")
    assert result.exit_code == 1
    assert "must not be in the config file" in result.output


def test_an_unreachable_llm_gets_an_apology_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPANION_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("COMPANION_LLM_MAX_RETRIES", "0")
    result = CliRunner().invoke(cli, ["chat", "--user", "alice"], input="hello\n")
    assert result.exit_code == 0
    assert "Sorry" in result.output and "saved" in result.output


def test_the_console_script_reads_a_pipe_until_its_end(fake_openai: FakeOpenAIServer, isolated: Path) -> None:
    fake_openai.script("chat-model", "one", "two")
    env = {
        **os.environ,
        "COMPANION_LLM_BASE_URL": fake_openai.url,
        "COMPANION_CHAT_MODEL": "chat-model",
        "COMPANION_MONITOR_MODEL": "monitor-model",
    }
    done = subprocess.run(
        [sys.executable, "-c", "from bot.cli.main import main; main()", "chat", "--user", "alice"],
        input="first\nsecond\n",
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["one", "two"]
    # it exited only after the monitor had looked at both turns
    monitor_prompts = [str(request.messages) for request in fake_openai.requests_for("monitor-model")]
    assert any("first" in prompt for prompt in monitor_prompts) and any(
        "second" in prompt for prompt in monitor_prompts
    )
    assert Journal(isolated / "data" / "companion.sqlite3").jobs.pending_jobs() == []


def test_history_and_dead_letters_are_listable(runner: CliRunner) -> None:
    alice = Scope("xiaoxiang", "cli:alice")

    def record(app: App) -> None:
        at = app.companion.clock.now()
        app.journal.changes.record_change(
            alice, "mem_1", action="update", actor="background_ai", old_content="Beijing", new_content="Shanghai", at=at
        )
        app.journal.jobs.dead_letter("monitor", alice, {"output": "{not ops}"}, "unreadable monitor output", at=at)
        app.journal.jobs.dead_letter("monitor", Scope("xiaoxiang", "cli:bob"), {}, "bob's problem", at=at)

    earlier_run(record)

    history = runner.invoke(cli, ["memory", "history", "--persona", "xiaoxiang", "--user", "alice", "--json"])
    [entry] = json.loads(history.output)
    assert (entry["old_content"], entry["new_content"], entry["actor"]) == ("Beijing", "Shanghai", "background_ai")

    mine = runner.invoke(cli, ["memory", "dead-letters", "--persona", "xiaoxiang", "--user", "alice"])
    assert "unreadable monitor output" in mine.output and "bob's problem" not in mine.output
    every = runner.invoke(cli, ["memory", "dead-letters", "--json"])
    assert {row["scope"] for row in json.loads(every.output)} == {"xiaoxiang/cli:alice", "xiaoxiang/cli:bob"}
    half = runner.invoke(cli, ["memory", "dead-letters", "--persona", "xiaoxiang"])
    assert half.exit_code == 2 and "--persona needs --user" in half.output
    by_default = runner.invoke(cli, ["memory", "dead-letters", "--user", "alice"])  # the default persona
    assert by_default.output == mine.output


def test_maintenance_runs_the_decay_pass_once(runner: CliRunner) -> None:
    alice, long_ago = Scope("xiaoxiang", "cli:alice"), datetime.now(UTC) - timedelta(days=15)
    old_episode = MemoryRecord(
        "mem_old", alice, "[long ago] talked about tea", "episode", 1.0, long_ago, long_ago, "user"
    )

    def remember(app: App) -> None:
        app.companion.knowledge.add(alice, "Alice likes tea", category="fact", source="user")
        app.companion.knowledge.add_records([old_episode])

    earlier_run(remember)
    result = runner.invoke(cli, ["maintenance"])
    assert result.exit_code == 0, result.output
    assert "decay: 1 due, 1 deleted, 0 reviewed, 0 rescheduled; 0 idle conversations summarised" in result.output
    assert "0 users consolidated" in result.output  # nobody wrote a message: no active user


def test_inspection_leaves_pending_background_work_alone(runner: CliRunner, fake_openai: FakeOpenAIServer) -> None:
    job = earlier_run(
        lambda app: app.journal.jobs.enqueue(
            "monitor", Scope("xiaoxiang", "cli:alice"), {"turn": {}}, at=app.companion.clock.now()
        )
    )
    result = runner.invoke(cli, ["memory", "list", "--persona", "xiaoxiang", "--user", "alice"])
    assert result.exit_code == 0
    journal = Journal(load_settings().storage.data_dir / "companion.sqlite3")
    assert [pending.id for pending in journal.jobs.pending_jobs()] == [job.id]
    assert fake_openai.requests_for("monitor-model") == []


def test_checkins_list_shows_the_planned_ones_per_user_for_the_operator(
    runner: CliRunner, fake_openai: FakeOpenAIServer
) -> None:
    clock = FakeClock(datetime.now(UTC) - timedelta(hours=3))  # the exam was three hours ago
    alice = Scope("xiaoxiang", "telegram:101")

    async def planned() -> PlanReport:
        """The planning pass of a process with no platform to send on (so nothing is sent)."""
        async with await build_app(load_settings(), clock=clock) as app:
            app.journal.checkins.user_wrote(alice, "telegram:chat:101", clock.now() - timedelta(days=2))
            app.companion.user_settings.set_checkins(alice, True)
            for plan, hours in (("Alice has an exam", 1), ("Alice has a party", 2)):
                app.companion.knowledge.add(
                    alice, plan, category="fact", source="user", about=clock.now() + timedelta(hours=hours)
                )
            clock.advance(hours=3)
            return await app.companion.checkins.plan()

    assert asyncio.run(planned()).planned == 2
    result = runner.invoke(cli, ["checkins", "list", "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert {(each["user_id"], each["rule"], each["state"]) for each in listed} == {
        ("telegram:101", "plan_passed", "planned")
    }
    assert "xiaoxiang/telegram:101  planned   plan_passed" in runner.invoke(cli, ["checkins", "list"]).output


def test_every_file_a_chat_writes_is_its_owners_alone_in_a_directory_others_may_list(
    runner: CliRunner, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    data = tmp_path / "made-beforehand"
    data.mkdir()
    data.chmod(0o755)  # as `mkdir` leaves it: the companion does not change a directory it did not make
    fake_openai.script("chat-model", "Noted!")
    previous = os.umask(0o022)  # the usual umask, under which SQLite and chromadb create files all may read
    try:
        result = runner.invoke(cli, ["--data-dir", str(data), "chat", "--user", "alice"], input="my pin is 4711\n")
    finally:
        os.umask(previous)
    assert result.exit_code == 0, result.output
    written = [path for path in data.rglob("*") if path.is_file()]
    assert any(path.name == "companion.sqlite3" for path in written)
    assert [path for path in written if stat.S_IMODE(path.stat().st_mode) & 0o077] == []
    settings = load_settings(data_dir=data)
    assert check_privacy(settings).ok  # the doctor's privacy check passes after an ordinary chat
