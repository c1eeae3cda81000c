"""`companion memory …`: every subcommand stays in its scope; export -> edit -> import round-trips."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from bot.app import App
from bot.cli.main import cli
from knowledge.records import MemoryRecord, Scope
from tests.fakes.earlier_run import earlier_run
from tests.fakes.openai_server import FakeOpenAIServer

ALICE, BOB = Scope("xiaoxiang", "cli:alice"), Scope("xiaoxiang", "cli:bob")


@pytest.fixture
def memories(runner: CliRunner) -> dict[str, MemoryRecord]:
    """Alice's and Bob's memories, stored the way the bot stores them."""

    def store(app: App) -> dict[str, MemoryRecord]:
        kb = app.companion.knowledge
        return {
            "ramen": kb.add(ALICE, "Alice loves ramen", category="fact", source="user"),
            "birthday": kb.add(ALICE, "Alice's birthday is 3 May", category="core", source="user", importance=3.0),
            "tea": kb.add(ALICE, "Alice drinks green tea", category="fact", source="user", importance=0.4),
            "bob": kb.add(BOB, "Bob's secret: he fears spiders", category="fact", source="user"),
        }

    return earlier_run(store)


def memory(runner: CliRunner, *args: str, user: str = "alice", input: str | None = None) -> Result:
    return runner.invoke(cli, ["memory", *args, "--persona", "xiaoxiang", "--user", user], input=input)


def contents(scope: Scope) -> dict[str, MemoryRecord]:
    return earlier_run(lambda app: {record.content: record for record in app.companion.knowledge.memories(scope)})


def test_export_edit_import_round_trips(runner: CliRunner, memories: dict[str, MemoryRecord], tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    exported = memory(runner, "export", "-o", str(path))
    assert exported.exit_code == 0, exported.output
    text = path.read_text(encoding="utf-8")
    assert "## Active Memories" in text and "## Archived Memories" in text and "Bob" not in text
    assert text.index(memories["birthday"].id) < text.index(memories["ramen"].id)  # most important first
    ramen, tea = memories["ramen"].id, memories["tea"].id
    edited = (
        text.replace("Alice loves ramen", "Alice loves udon")
        .replace(f"[{tea}] fact | 0.40 |", f"[{tea}] fact | 2.00 |")
        .replace(f"[{memories['birthday'].id}] core | 3.00 |", f"[{memories['birthday'].id}] core | high |")
        + "\n### [new] fact | 1.20 | 2026-01-01 00:00 | 0\nAlice adopted a cat called Mochi\n"
    )
    path.write_text(edited, encoding="utf-8")

    result = memory(runner, "import", str(path))
    assert result.exit_code == 0, result.output
    assert "block skipped: importance 'high' is not a number" in result.stderr
    assert "2 updated, 1 added, 0 deleted, 0 unchanged" in result.stdout
    after = contents(ALICE)
    assert set(after) == {
        "Alice loves udon",
        "Alice's birthday is 3 May",
        "Alice drinks green tea",
        "Alice adopted a cat called Mochi",
    }
    assert after["Alice loves udon"].id == ramen and after["Alice drinks green tea"].importance == 2.0
    assert after["Alice adopted a cat called Mochi"].importance == 1.2
    assert "Alice loves ramen" in (tmp_path / "MEMORY.md.bak").read_text(encoding="utf-8")  # as it was before
    assert set(contents(BOB)) == {"Bob's secret: he fears spiders"}

    history = json.loads(memory(runner, "history", "--id", ramen, "--json").output)
    assert [(row["actor"], row["old_content"], row["new_content"]) for row in history] == [
        ("operator", "Alice loves ramen", "Alice loves udon")
    ]
    again = memory(runner, "import", str(path))
    assert "0 updated, 0 added, 0 deleted, 3 unchanged" in again.stdout  # the new block is not added twice


def test_replace_deletes_what_the_file_leaves_out_but_never_past_a_broken_block(
    runner: CliRunner, memories: dict[str, MemoryRecord], tmp_path: Path
) -> None:
    path = tmp_path / "MEMORY.md"
    memory(runner, "export", "-o", str(path))
    text = path.read_text(encoding="utf-8")
    block = f"### [{memories['tea'].id}] fact | 0.40 |"
    without_tea = "\n".join(line for line in text.splitlines() if "green tea" not in line and block not in line)
    path.write_text(without_tea.replace("core | 3.00", "core | ???"), encoding="utf-8")
    refused = memory(runner, "import", str(path), "--replace")
    assert refused.exit_code == 1 and "with --replace every block must be readable" in refused.output
    assert "Alice drinks green tea" in contents(ALICE)

    path.write_text(without_tea, encoding="utf-8")
    dry = memory(runner, "import", str(path), "--replace", "--dry-run")
    assert "1 deleted" in dry.stdout and "dry run" in dry.stdout and "Alice drinks green tea" in contents(ALICE)
    done = memory(runner, "import", str(path), "--replace")
    assert done.exit_code == 0 and set(contents(ALICE)) == {"Alice loves ramen", "Alice's birthday is 3 May"}
    assert set(contents(BOB)) == {"Bob's secret: he fears spiders"}


def test_json_export_restores_a_scope_exactly(
    runner: CliRunner, memories: dict[str, MemoryRecord], tmp_path: Path
) -> None:
    path = tmp_path / "alice.json"
    memory(runner, "export", "-o", str(path))
    assert json.loads(path.read_text(encoding="utf-8"))["user_id"] == "cli:alice"
    before = contents(ALICE)
    assert memory(runner, "forget", "--all", "--yes").exit_code == 0 and contents(ALICE) == {}
    restored = memory(runner, "import", str(path))
    assert "3 added" in restored.stdout, restored.output
    after = contents(ALICE)
    for content, record in before.items():
        assert (after[content].importance, after[content].last_access, after[content].category) == (
            record.importance,
            record.last_access,
            record.category,
        )


def test_a_file_with_no_readable_memory_is_an_error_and_changes_nothing(
    runner: CliRunner, memories: dict[str, MemoryRecord], tmp_path: Path
) -> None:
    before = contents(ALICE)
    for name, text in (("numbers.json", "[1,2,3]"), ("numbers-in-an-export.json", '{"memories": [1, 2, 3]}')):
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        refused = memory(runner, "import", str(path))
        assert refused.exit_code == 1, refused.output
        assert f"Error: nothing imported: {name} holds no memory that can be read" in refused.stderr
        assert "updated" not in refused.stdout and not (tmp_path / f"{name}.bak").exists()
    assert "memory #3: skipped: 3 is not a memory object" in refused.stderr  # each entry says why
    assert contents(ALICE) == before


def test_a_file_of_another_scope_is_refused_unless_asked(
    runner: CliRunner, memories: dict[str, MemoryRecord], tmp_path: Path
) -> None:
    path = tmp_path / "bob.md"
    memory(runner, "export", "-o", str(path), user="bob")
    refused = memory(runner, "import", str(path))
    assert (
        refused.exit_code == 1 and "holds the memories of xiaoxiang/cli:bob, not xiaoxiang/cli:alice" in refused.output
    )
    assert "Bob's secret: he fears spiders" not in contents(ALICE)
    copied = memory(runner, "import", str(path), "--from-other-scope")
    assert "1 added" in copied.stdout
    assert contents(ALICE)["Bob's secret: he fears spiders"].id != memories["bob"].id  # a copy: Bob keeps his
    assert set(contents(BOB)) == {"Bob's secret: he fears spiders"}


def test_export_keeps_the_previous_file(runner: CliRunner, memories: dict[str, MemoryRecord], tmp_path: Path) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_text("my notes", encoding="utf-8")
    assert memory(runner, "export", "-o", str(path)).exit_code == 0
    assert (tmp_path / "MEMORY.md.bak").read_text(encoding="utf-8") == "my notes"


def test_no_subcommand_reaches_another_users_memory(
    runner: CliRunner, memories: dict[str, MemoryRecord], tmp_path: Path
) -> None:
    bobs = memories["bob"].id
    listed = memory(runner, "list", "--json")
    assert bobs not in listed.output and "spiders" not in listed.output
    assert "spiders" not in memory(runner, "search", "spiders", "--json").output
    shown = memory(runner, "show", bobs)
    assert shown.exit_code == 1 and f"xiaoxiang/cli:alice has no memory {bobs}" in shown.output
    edited = memory(runner, "edit", bobs, "--text", "Bob fears nothing")
    assert edited.exit_code == 1 and "has no memory" in edited.output
    forgot = memory(runner, "forget", bobs)
    assert "Forgot 0 memories," in forgot.output and "has no memory" in forgot.output
    exported = memory(runner, "export")
    assert "spiders" not in exported.output and bobs not in exported.output
    stats = json.loads(memory(runner, "stats", "--json").output)
    assert stats["memories"] == 3 and stats["scope"] == "xiaoxiang/cli:alice"
    assert set(contents(BOB)) == {"Bob's secret: he fears spiders"}


def test_list_search_show_edit_and_forget(runner: CliRunner, memories: dict[str, MemoryRecord]) -> None:
    listed = memory(runner, "list", "--category", "core")
    assert listed.output.strip().endswith("Alice's birthday is 3 May") and "ramen" not in listed.output
    found = {hit["content"]: hit for hit in json.loads(memory(runner, "search", "ramen noodles", "--json").output)}
    assert 0.8 < found["Alice loves ramen"]["similarity"] <= 1
    assert found["Alice loves ramen"]["relevance"] == max(hit["relevance"] for hit in found.values())
    ramen = memories["ramen"].id
    edited = memory(runner, "edit", ramen, "--importance", "2.2", "--category", "core")
    assert edited.exit_code == 0 and "core" in edited.output and "2.20" in edited.output
    shown = json.loads(memory(runner, "show", ramen, "--json").output)
    assert (shown["category"], shown["importance"]) == ("core", 2.2)
    assert "category fact -> core, importance 1.00 -> 2.20" in shown["history"][0]["detail"]
    empty = memory(runner, "edit", ramen, "--text", "  ")
    assert empty.exit_code == 1 and "needs some text" in empty.output
    assert memory(runner, "forget", ramen).output.startswith("Forgot 1 memories, 0 messages")
    assert "Alice loves ramen" not in contents(ALICE)
    declined = memory(runner, "forget", "--all", input="n\n")
    assert declined.exit_code == 1 and len(contents(ALICE)) == 2
    both = memory(runner, "forget", ramen, "--all")
    assert both.exit_code == 2 and "not both" in both.output


def test_stats_count_categories_importance_dead_letters_and_tokens(
    runner: CliRunner, fake_openai: FakeOpenAIServer, memories: dict[str, MemoryRecord]
) -> None:
    fake_openai.script("chat-model", "Hi Alice!")
    fake_openai.script("monitor-model", "[SKIP]")
    assert runner.invoke(cli, ["chat", "--user", "alice"], input="hello\n").exit_code == 0
    stats = json.loads(memory(runner, "stats", "--json").output)
    assert stats["by_category"] == {"fact": 2, "core": 1}
    assert {(row["from"], row["count"]) for row in stats["importance"] if row["count"]} == {
        (0.0, 1),
        (1.0, 1),
        (3.0, 1),
    }
    assert stats["dead_letters"] == 0
    assert stats["backlog_all_scopes"] == {
        "pending": 0,
        "oldest_waiting_seconds": 0.0,
        "warning_past_seconds": 600.0,
        "behind": False,
    }
    usage = {row["role"]: row for row in stats["token_usage_all_scopes"]}
    assert usage["chat"]["model"] == "chat-model" and usage["chat"]["calls"] == 1
    assert usage["chat"]["prompt_tokens"] > 100 and usage["chat"]["completion_tokens"] > 0
    assert usage["monitor"]["calls"] == 1
    assert stats["tokens_today"] > 100 and stats["daily_tokens"] is None
    text = memory(runner, "stats").output
    assert "xiaoxiang/cli:alice: 3 memories (core 1, fact 2)" in text and "chat       chat-model" in text
    assert "background jobs waiting (all scopes): 0, the oldest for 0.0 min (a warning is logged past 10 min)" in text
    assert "(no daily quota)" in text


def test_stats_show_the_users_tokens_today_against_their_quota(
    runner: CliRunner, fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPANION_USER_DAILY_TOKENS", "50000")
    fake_openai.script("chat-model", "Hi Alice!")
    assert runner.invoke(cli, ["chat", "--user", "alice"], input="hello\n").exit_code == 0
    stats = json.loads(memory(runner, "stats", "--json").output)
    assert 100 < stats["tokens_today"] < 50000 and stats["daily_tokens"] == 50000
    assert "of 50,000 a day" in memory(runner, "stats").output


def test_search_with_history_finds_past_messages_of_the_scope_only(runner: CliRunner) -> None:

    def say(app: App) -> None:
        for scope, text in ((ALICE, "I adopted a greyhound called Biscuit"), (BOB, "my greyhound hates the rain")):
            app.working_memory.append(
                scope.persona_id,
                f"dm:{scope.user_id}",
                role="user",
                user_id=scope.user_id,
                speaker_name=scope.user_id,
                content=text,
                sent_at=app.companion.clock.now(),
            )

    earlier_run(say)
    assert "Biscuit" not in memory(runner, "search", "greyhound").output  # memories only by default
    found = json.loads(memory(runner, "search", "greyhound", "--history", "--json").output)
    assert [(hit["category"], hit["content"]) for hit in found] == [("message", "I adopted a greyhound called Biscuit")]


@pytest.mark.parametrize("command", [["list"], ["search", "ramen"], ["export"], ["stats"], ["history"]])
def test_reading_commands_default_to_the_default_persona(
    runner: CliRunner, memories: dict[str, MemoryRecord], command: list[str]
) -> None:
    result = runner.invoke(cli, ["memory", *command, "--user", "alice", "--json"])
    assert result.exit_code == 0, result.output
    with_persona = runner.invoke(cli, ["memory", *command, "--user", "alice", "--persona", "xiaoxiang", "--json"])
    exported_at = re.compile(r'"exported_at": "[^"]*"')  # the one field that differs between two runs
    assert exported_at.sub("", result.output) == exported_at.sub("", with_persona.output)


@pytest.mark.parametrize("command", [["forget", "--all", "--yes"], ["edit", "mem_1", "--text", "x"]])
def test_commands_that_change_memories_still_name_the_persona(
    runner: CliRunner, memories: dict[str, MemoryRecord], command: list[str]
) -> None:
    result = runner.invoke(cli, ["memory", *command, "--user", "alice"])
    assert result.exit_code == 2 and "Missing option '--persona'" in result.output
    assert "Alice loves ramen" in contents(ALICE)
    help_text = runner.invoke(cli, ["memory", command[0], "--help"]).output
    assert "required: this command changes" in " ".join(help_text.split())


def test_sharing_is_edited_shown_exported_and_imported_back(
    runner: CliRunner, memories: dict[str, MemoryRecord], tmp_path: Path
) -> None:
    ramen, tea = memories["ramen"].id, memories["tea"].id
    listed = memory(runner, "list").output
    assert f"{ramen}  fact     1.00  [private]  Alice loves ramen" in listed  # operator-made: private
    edited = memory(runner, "edit", ramen, "--shared", "yes")
    assert edited.exit_code == 0 and "[private, shared]" in edited.output
    shown = json.loads(memory(runner, "show", ramen, "--json").output)
    assert (shown["shared"], shown["learned_in"], shown["content"]) == (True, None, "Alice loves ramen")
    assert shown["history"][0]["detail"] == "shared in groups"
    assert memory(runner, "edit", ramen, "--shared", "maybe").exit_code == 2

    path = tmp_path / "MEMORY.md"
    assert memory(runner, "export", "-o", str(path)).exit_code == 0
    text = path.read_text(encoding="utf-8")
    assert f"### [{ramen}] fact | 1.00 |" in text and "| 0 | private, shared\nAlice loves ramen" in text
    tea_header = next(line for line in text.splitlines() if line.startswith(f"### [{tea}]"))
    path.write_text(
        text.replace(tea_header, tea_header + ", shared").replace(  # share the tea by editing the file
            " | private, shared\nAlice loves ramen", " | private\nAlice loves ramen"
        ),  # and unshare the ramen
        encoding="utf-8",
    )
    imported = memory(runner, "import", str(path))
    assert "2 updated, 0 added" in imported.stdout, imported.output
    after = contents(ALICE)
    assert (after["Alice drinks green tea"].shared, after["Alice loves ramen"].shared) == (True, False)

    json_path = tmp_path / "alice.json"
    assert memory(runner, "export", "-o", str(json_path)).exit_code == 0
    assert memory(runner, "forget", "--all", "--yes").exit_code == 0 and contents(ALICE) == {}
    assert "3 added" in memory(runner, "import", str(json_path)).stdout
    restored = contents(ALICE)
    assert {content: record.shared for content, record in restored.items()} == {
        "Alice loves ramen": False,
        "Alice's birthday is 3 May": False,
        "Alice drinks green tea": True,
    }


def test_an_old_memory_file_without_origins_loads_as_private(
    runner: CliRunner, memories: dict[str, MemoryRecord], tmp_path: Path
) -> None:
    path = tmp_path / "old.md"
    path.write_text(
        "# Memories: xiaoxiang/cli:alice\n\n<!-- persona: xiaoxiang -->\n<!-- user: cli:alice -->\n\n"
        "## Active Memories\n\n### [new] fact | 1.50 | 2026-01-01 00:00 | 0\nAlice has a cat called Mochi\n",
        encoding="utf-8",
    )
    result = memory(runner, "import", str(path))
    assert result.exit_code == 0 and "1 added" in result.stdout and result.stderr == ""
    mochi = contents(ALICE)["Alice has a cat called Mochi"]
    assert (mochi.learned_in, mochi.shared) == (None, False)


def test_dates_are_edited_shown_and_exported_in_the_users_time_zone(
    runner: CliRunner, memories: dict[str, MemoryRecord], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("COMPANION_TIMEZONE", "Asia/Shanghai")
    ramen = memories["ramen"].id
    edited = memory(runner, "edit", ramen, "--about", "2030-05-01 10:00", "--until", "2030-05-02")
    assert edited.exit_code == 0, edited.output
    shown = json.loads(memory(runner, "show", ramen, "--json").output)
    assert (shown["about"], shown["until"]) == ("2030-05-01T02:00:00+00:00", "2030-05-01T16:00:00+00:00")
    assert "about 2030-05-01 02:00 UTC, until 2030-05-01 16:00 UTC" in shown["history"][-1]["detail"]
    exported = memory(runner, "export").output
    assert (
        f"[{ramen}] fact | 1.00 |" in exported
        and "| private | about 2030-05-01 02:00; until 2030-05-01 16:00" in exported
    )
    assert "time zone" not in exported  # the default is the operator's, not the user's choice

    assert memory(runner, "edit", ramen, "--until", "none").exit_code == 0
    assert json.loads(memory(runner, "show", ramen, "--json").output)["until"] is None
    refused = memory(runner, "edit", ramen, "--about", "some day")
    assert refused.exit_code != 0 and "'some day' is not a date or time I can read" in refused.output
    stats = memory(runner, "stats").output
    assert "time zone: Asia/Shanghai (the default)" in stats


def test_search_keeps_to_since_and_until_for_memories_and_past_messages(
    runner: CliRunner, memories: dict[str, MemoryRecord]
) -> None:
    long_ago = datetime(2021, 6, 1, 12, 0, tzinfo=UTC)

    def say(app: App) -> None:
        for when, text in (
            (long_ago, "ramen in Osaka was the best"),
            (app.companion.clock.now(), "ramen again tonight"),
        ):
            app.working_memory.append(
                "xiaoxiang",
                "dm:cli:alice",
                role="user",
                user_id=ALICE.user_id,
                speaker_name="Alice",
                content=text,
                sent_at=when,
            )

    earlier_run(say)

    def found(*window: str) -> list[str]:
        result = memory(runner, "search", "ramen", "--history", "--json", *window)
        assert result.exit_code == 0, result.output
        return [hit["content"] for hit in json.loads(result.output)]

    assert set(found()) >= {"Alice loves ramen", "ramen in Osaka was the best", "ramen again tonight"}
    assert found("--since", "2021-05-01", "--until", "2021-06-01") == ["ramen in Osaka was the best"]  # the day counts
    recent = found("--since", "yesterday")
    assert (
        "Alice loves ramen" in recent
        and "ramen again tonight" in recent
        and "ramen in Osaka was the best" not in recent
    )
    assert memory(runner, "search", "ramen", "--until", "2000-01-01").output.startswith("Nothing in")


def test_the_chosen_time_zone_is_exported_and_imported_with_the_memories(
    runner: CliRunner, memories: dict[str, MemoryRecord], tmp_path: Path
) -> None:
    assert "Europe/Berlin" in runner.invoke(cli, ["chat", "--user", "alice"], input="/timezone Europe/Berlin\n").output
    path = tmp_path / "alice.json"
    assert memory(runner, "export", "-o", str(path)).exit_code == 0
    assert json.loads(path.read_text(encoding="utf-8"))["time_zone"] == "Europe/Berlin"
    assert "time zone: Europe/Berlin (chosen with /timezone)" in memory(runner, "stats").output
    result = memory(runner, "import", str(path), "--from-other-scope", user="bob")
    assert result.exit_code == 0, result.output
    assert "time zone set to Europe/Berlin" in result.output
    assert json.loads(memory(runner, "stats", "--json", user="bob").output)["time_zone"] == "Europe/Berlin"
