"""Every start-up failure is one line naming the file and the fix; `--debug` shows the traceback."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
from chromadb.api.shared_system_client import SharedSystemClient
from click.testing import CliRunner

from bot.cli.main import cli
from knowledge.memory.chroma_store import open_chroma_client
from personas.loader import PERSONA_DIR

LIST = ["memory", "list", "--user", "alice"]


def fails_in_one_line(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(cli, list(args), input="hi\n")
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    [line] = result.output.strip().splitlines()
    return line


@pytest.fixture
def data(isolated: Path) -> Path:
    return isolated / "data"


@pytest.fixture
def used(runner: CliRunner, data: Path) -> Path:
    """A data directory with a conversation and a memory in it."""
    result = runner.invoke(cli, ["chat", "--user", "alice"], input="remember that I like green tea\n")
    assert result.exit_code == 0, result.output
    return data


def test_a_broken_config_file_names_the_file(runner: CliRunner, isolated: Path) -> None:
    (isolated / "companion.toml").write_text('data_dir = "unterminated\n')
    line = fails_in_one_line(runner, *LIST)
    assert str(isolated / "companion.toml") in line and "not valid TOML" in line and "COMPANION_CONFIG" in line


def test_a_binary_persona_file_names_the_file_and_the_fix(runner: CliRunner, data: Path) -> None:
    (data / "personas").mkdir(parents=True)
    (data / "personas" / "xiaoxiang.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe binary")
    line = fails_in_one_line(runner, *LIST)
    assert str(data / "personas" / "xiaoxiang.yaml") in line and "not UTF-8" in line and "persona validate" in line


def test_a_broken_toml_persona_file_or_two_files_for_one_persona_name_the_files(runner: CliRunner, data: Path) -> None:
    mine = data / "personas"
    mine.mkdir(parents=True)
    (mine / "xiaoxiang.toml").write_text('id = "xiaoxiang"\nname = [\n')
    line = fails_in_one_line(runner, *LIST)
    assert "xiaoxiang.toml: not valid TOML: " in line and f"({mine / 'xiaoxiang.toml'})" in line
    shutil.copy(PERSONA_DIR / "xiaoxiang.yaml", mine)
    line = fails_in_one_line(runner, *LIST)
    assert "xiaoxiang.yaml and xiaoxiang.toml" in line and "both define persona 'xiaoxiang'" in line
    assert "persona validate" in line


def test_a_damaged_message_database_names_the_file_and_the_fix(runner: CliRunner, used: Path) -> None:
    with (used / "companion.sqlite3").open("r+b") as database:
        database.write(b"this is no longer SQLite" * 8)
    line = fails_in_one_line(runner, *LIST)
    assert str(used / "companion.sqlite3") in line and "damaged" in line and "backup" in line


def test_a_damaged_memory_store_names_the_file_and_the_fix(runner: CliRunner, used: Path) -> None:
    with (used / "chroma" / "chroma.sqlite3").open("r+b") as database:
        database.write(b"this is no longer SQLite" * 8)
    line = fails_in_one_line(runner, *LIST)
    assert str(used / "chroma" / "chroma.sqlite3") in line and "damaged" in line and "memory import" in line


def test_with_debug_the_traceback_is_shown(runner: CliRunner, used: Path) -> None:
    (used / "companion.sqlite3").write_bytes(b"garbage" * 100)
    result = runner.invoke(cli, ["--debug", *LIST])
    assert result.exit_code == 1
    assert "damaged" in str(result.exception) and result.exc_info is not None


def test_a_missing_memory_store_is_refused_until_accepted_and_restored(
    runner: CliRunner, used: Path, tmp_path: Path
) -> None:
    exported = runner.invoke(cli, ["memory", "export", "--user", "alice", "-o", str(tmp_path / "alice.md")])
    assert exported.exit_code == 0, exported.output
    shutil.rmtree(used / "chroma")
    SharedSystemClient.clear_system_cache()  # chromadb keeps an opened store per path in the process

    line = fails_in_one_line(runner, *LIST)
    assert str(used / "chroma") in line and "refusing to start" in line and "--accept-empty-memory" in line
    assert "memory export" in line and ".bak" in line

    restore = ["memory", "import", "--persona", "xiaoxiang", "--user", "alice", str(tmp_path / "alice.md")]
    restored = runner.invoke(cli, ["--accept-empty-memory", *restore])
    assert restored.exit_code == 0, restored.output
    listed = runner.invoke(cli, LIST)  # the new store is now the recorded one: no flag needed
    assert listed.exit_code == 0 and "green tea" in listed.output


def test_a_new_empty_store_in_place_of_the_old_one_is_refused(runner: CliRunner, used: Path) -> None:
    client = open_chroma_client(path=used / "chroma")
    client.delete_collection("memories")
    client.create_collection("memories")  # same name, none of the memories
    SharedSystemClient.clear_system_cache()
    line = fails_in_one_line(runner, *LIST)
    assert "not the one this data directory recorded" in line


def test_a_fresh_data_directory_starts_without_any_flag(runner: CliRunner) -> None:
    result = runner.invoke(cli, LIST)
    assert result.exit_code == 0 and "No memories for xiaoxiang/cli:alice" in result.output


def test_a_new_data_directory_is_readable_by_its_owner_only(runner: CliRunner, data: Path) -> None:
    result = runner.invoke(cli, LIST)
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(data.stat().st_mode) == 0o700  # other local users reach none of the files inside


def test_an_emptied_message_database_beside_memories_is_refused_until_accepted(runner: CliRunner, used: Path) -> None:
    for leftover in used.glob("companion.sqlite3-*"):  # its write-ahead log goes with it, as in a bad restore
        leftover.unlink()
    (used / "companion.sqlite3").write_bytes(b"")
    line = fails_in_one_line(runner, *LIST)
    assert str(used / "companion.sqlite3") in line and "new or empty" in line and "backup" in line
    accepted = runner.invoke(cli, ["--accept-empty-memory", *LIST])
    assert accepted.exit_code == 0 and "green tea" in accepted.output
    assert runner.invoke(cli, LIST).exit_code == 0  # the memory store is recorded again: no flag needed
