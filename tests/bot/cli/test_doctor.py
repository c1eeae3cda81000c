"""`companion doctor`: every check passes on a sound setup and fails, in one line with its fix, on a broken one."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import SecretStr

from bot.cli import doctor
from bot.cli.data_dir_lock import DataDirLock
from bot.cli.main import cli
from bot.config import Settings
from knowledge.memory.chroma_erasure import COMPACTION_DUE
from tests.fakes.discord_api import BOT_NAME, FakeDiscordAPI
from tests.fakes.openai_server import FakeError, FakeOpenAIServer
from tests.fakes.telegram_server import FakeBotAPI
from tests.servers import ChromaServer, PostgresServer, free_port

ROLES = ("chat", "monitor", "summarizer", "reviewer")
TELEGRAM_TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0"
DISCORD_TOKEN = "MTA4NjY1NzQ2MzM4MDU2MzEyMA.GbKDzl.3q9cM1h2lU0pRHcTmfvV8oN4kPj7wXyZaBcDeF"


@pytest.fixture
def endpoint(fake_openai: FakeOpenAIServer, settings: Settings) -> Settings:
    """Settings whose endpoint has every configured model."""
    for role in ROLES:
        fake_openai.set_default(f"{role}-model", "OK")
    return settings


@pytest.fixture
def data_dir(settings: Settings) -> Path:
    settings.storage.data_dir.mkdir(mode=0o700)
    return settings.storage.data_dir


def test_versions_pass_as_installed_and_name_a_package_too_old(settings: Settings) -> None:
    found = doctor.check_versions(settings)
    assert found.ok and "chromadb" in found.text
    versions = {"chromadb": "1.0.0"}

    def installed(name: str) -> str:
        return versions.get(name) or importlib.metadata.version(name)

    found = doctor.check_versions(settings, installed)
    assert not found.ok
    assert "chromadb 1.0.0 is installed" in found.text and "make install" in found.text


def test_a_missing_package_is_named(settings: Settings) -> None:
    def installed(name: str) -> str:
        if name == "pydantic":
            raise importlib.metadata.PackageNotFoundError(name)
        return importlib.metadata.version(name)

    found = doctor.check_versions(settings, installed)
    assert not found.ok and "pydantic is missing" in found.text


def test_data_directory_to_be_created_free_or_held(settings: Settings, data_dir: Path) -> None:
    assert doctor.check_data_dir(settings).ok and "free" in doctor.check_data_dir(settings).text
    lock = DataDirLock(data_dir)
    assert lock.try_acquire("run")
    try:
        found = doctor.check_data_dir(settings)
        assert found.ok and f"held by `companion run` (PID {os.getpid()})" in found.text
    finally:
        lock.release()
    fresh = settings.changed(storage={"data_dir": data_dir / "new"})
    assert doctor.check_data_dir(fresh).ok and "will be created" in doctor.check_data_dir(fresh).text


def test_data_directory_open_to_others_or_not_a_directory_fails(settings: Settings, data_dir: Path) -> None:
    data_dir.chmod(0o755)
    found = doctor.check_data_dir(settings)
    assert not found.ok and f"chmod 700 {data_dir}" in found.text
    a_file = data_dir / "file"
    a_file.write_text("")
    found = doctor.check_data_dir(settings.changed(storage={"data_dir": a_file}))
    assert not found.ok and "not a directory" in found.text and "COMPANION_DATA_DIR" in found.text


def test_the_endpoint_answers_with_its_models(endpoint: Settings, fake_openai: FakeOpenAIServer) -> None:
    found = doctor.check_model(endpoint)
    assert found.ok, found.text
    tiny = fake_openai.requests_for("chat-model")[-1].body
    assert tiny["max_tokens"] <= 5


def test_a_dead_endpoint_is_named_in_one_line(settings: Settings) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    found = doctor.check_model(settings.changed(llm={"base_url": dead}))
    assert not found.ok and "\n" not in found.text
    assert f"the endpoint {dead} is not reachable" in found.text and "COMPANION_LLM_BASE_URL" in found.text


def test_a_model_the_endpoint_lacks_is_named(endpoint: Settings) -> None:
    found = doctor.check_model(endpoint.changed(llm={"chat_model": "gpt-9"}))
    assert not found.ok and "has no model gpt-9" in found.text and "COMPANION_CHAT_MODEL" in found.text


def test_a_failing_completion_is_named(endpoint: Settings, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.script("chat-model", FakeError(500))
    found = doctor.check_model(endpoint)
    assert not found.ok and "chat-model" in found.text and "HTTP 500" in found.text


def test_an_embedded_model_that_cannot_load_says_why(tmp_path: Path) -> None:
    from bot.app import model_settings
    from core.llm.embedded import LlamaCppClient

    settings = Settings(llm={"base_url": None})
    missing = LlamaCppClient(model_settings(settings.llm), model_path=tmp_path / "missing.gguf")
    found = doctor.check_model(settings, embedded=missing)
    assert not found.ok and "cannot run" in found.text and "COMPANION_LLM_BASE_URL" in found.text


def test_tokens_unset_pass_and_malformed_fail(settings: Settings) -> None:
    assert all(found.ok for found in doctor.check_tokens(settings, online=False))
    broken = settings.changed(telegram={"token": SecretStr("123:abc")}, discord={"token": SecretStr("x")})
    telegram, discord = doctor.check_tokens(broken, online=False)
    assert not telegram.ok and "@BotFather" in telegram.text
    assert not discord.ok and "developer portal" in discord.text
    shaped = settings.changed(
        telegram={"token": SecretStr(TELEGRAM_TOKEN)}, discord={"token": SecretStr(DISCORD_TOKEN)}
    )
    assert all(found.ok and "well-formed" in found.text for found in doctor.check_tokens(shaped, online=False))


def test_online_tokens_are_asked_of_telegram_and_discord(settings: Settings) -> None:
    with FakeBotAPI(TELEGRAM_TOKEN, "xiaoxiang_bot") as telegram, FakeDiscordAPI(DISCORD_TOKEN) as discord:
        shaped = settings.changed(
            telegram={"token": SecretStr(TELEGRAM_TOKEN), "base_url": telegram.url},
            discord={"token": SecretStr(DISCORD_TOKEN)},
        )
        accepted = doctor.check_tokens(shaped, online=True, discord_api=discord.url)
        assert [found.ok for found in accepted] == [True, True]
        assert "@xiaoxiang_bot" in accepted[0].text and BOT_NAME in accepted[1].text
        assert [call.method for call in telegram.calls] == ["getMe"]
        wrong = DISCORD_TOKEN[:-1] + "x"
        refused = doctor.check_tokens(
            shaped.changed(
                telegram={"token": SecretStr("987654321" + TELEGRAM_TOKEN[9:])}, discord={"token": SecretStr(wrong)}
            ),
            online=True,
            discord_api=discord.url,
        )
    assert [found.ok for found in refused] == [False, False]
    assert "Telegram refused COMPANION_TELEGRAM_TOKEN" in refused[0].text and "HTTP 401" in refused[1].text


def test_server_mode_off_passes(settings: Settings) -> None:
    assert [found.ok for found in doctor.check_server_mode(settings)] == [True]


def test_server_mode_reachable_and_migrated(settings: Settings, database_url: str, chroma_server: ChromaServer) -> None:
    server = settings.changed(
        storage={"database_url": SecretStr(database_url), "chroma_host": "127.0.0.1", "chroma_port": chroma_server.port}
    )
    postgres, chroma = doctor.check_server_mode(server)
    assert postgres.ok and "every migration applied" in postgres.text
    assert chroma.ok and "reachable" in chroma.text


def test_server_mode_unmigrated_or_unreachable_fails(settings: Settings, postgres_server: PostgresServer) -> None:
    empty = postgres_server.create_database("doctor_unmigrated")
    server = settings.changed(
        storage={"database_url": SecretStr(empty), "chroma_host": "127.0.0.1", "chroma_port": free_port()}
    )
    postgres, chroma = doctor.check_server_mode(server)
    assert not postgres.ok and "migrations are not applied" in postgres.text and "companion run" in postgres.text
    assert not chroma.ok and "not reachable" in chroma.text and "chroma run" in chroma.text
    dead = server.changed(storage={"database_url": SecretStr(f"postgresql://nobody@127.0.0.1:{free_port()}/none")})
    postgres, _ = doctor.check_server_mode(dead)
    assert not postgres.ok and "COMPANION_DATABASE_URL cannot be used" in postgres.text


def test_time_zone_set_or_the_machines_and_a_machine_without_one(settings: Settings) -> None:
    assert doctor.check_time_zone(settings).ok
    unset = settings.model_copy(update={"timezone": None})
    assert doctor.check_time_zone(unset, lambda: "Europe/Berlin").text.startswith("Europe/Berlin")

    def unreadable() -> str:
        raise LookupError("no zone named in /etc/timezone")

    found = doctor.check_time_zone(unset, unreadable)
    assert not found.ok and "COMPANION_TIMEZONE=Area/City" in found.text
    assert not doctor.check_time_zone(unset, lambda: None).ok


def test_every_persona_file_valid_and_the_default_among_them(settings: Settings) -> None:
    assert doctor.check_personas(settings).ok
    settings.own_persona_dir.mkdir(parents=True)
    (settings.own_persona_dir / "broken.yaml").write_text("id: broken\nname: Broken\n")
    found = doctor.check_personas(settings)
    assert not found.ok and "broken.yaml" in found.text and "persona validate" in found.text
    (settings.own_persona_dir / "broken.yaml").unlink()
    (settings.own_persona_dir / "mia.toml").write_text(
        'id = "mia"\nname = "Mia"\npersonality = "kind"\ngreetings = ["hi"]\n'
    )
    assert doctor.check_personas(settings).text == "2 valid: mia, xiaoxiang"
    (settings.own_persona_dir / "mia.yaml").write_text("id: mia\nname: Mia\npersonality: kind\ngreetings: [hi]\n")
    found = doctor.check_personas(settings)
    assert not found.ok and "mia.yaml and mia.toml" in found.text and "both define persona 'mia'" in found.text
    (settings.own_persona_dir / "mia.yaml").unlink()
    (settings.own_persona_dir / "broken.toml").write_text('id = "broken"\nname = [\n')
    found = doctor.check_personas(settings)
    assert not found.ok and "broken.toml: not valid TOML" in found.text
    (settings.own_persona_dir / "broken.toml").unlink()
    found = doctor.check_personas(settings.model_copy(update={"default_persona": "nobody"}))
    assert not found.ok and "'nobody'" in found.text and "xiaoxiang" in found.text


def test_free_disk(settings: Settings) -> None:
    assert doctor.check_disk(settings).ok
    found = doctor.check_disk(settings, lambda path: 100 * 2**20)
    assert not found.ok and "100 MB free" in found.text and "free at least" in found.text


def test_privacy_files_others_may_read_and_vectors_left(settings: Settings, data_dir: Path) -> None:
    assert doctor.check_privacy(settings).ok
    (data_dir / "notes.txt").write_text("hello")
    (data_dir / "notes.txt").chmod(0o644)
    found = doctor.check_privacy(settings)
    assert not found.ok and "notes.txt" in found.text and "chmod" in found.text
    (data_dir / "notes.txt").chmod(0o600)
    (data_dir / "chroma").mkdir()
    (data_dir / "chroma" / COMPACTION_DUE).write_text("")
    found = doctor.check_privacy(settings)
    assert not found.ok and "companion maintenance" in found.text


def test_the_command_passes_with_one_line_per_check(
    fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for role in ROLES:
        fake_openai.set_default(f"{role}-model", "OK")
        monkeypatch.setenv(f"COMPANION_{role.upper()}_MODEL", f"{role}-model")
    monkeypatch.setenv("COMPANION_LLM_BASE_URL", fake_openai.url)
    result = CliRunner().invoke(cli, ["doctor"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 11 and all(line.startswith("ok ") for line in lines)
    assert "ok    setting names: all current" in lines


def test_old_setting_names_still_work_and_are_named_with_the_new_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_TOKEN", TELEGRAM_TOKEN)
    found = doctor.check_names()
    assert found.ok and found.text == "TELEGRAM_TOKEN is deprecated, use COMPANION_TELEGRAM_TOKEN"


def test_the_command_fails_on_a_dead_endpoint_without_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPANION_LLM_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    monkeypatch.setattr(doctor, "check_disk", lambda settings: 1 / 0)  # a check that breaks is one line too
    result = CliRunner().invoke(cli, ["doctor"])
    assert result.exit_code == 1
    failures = [line for line in result.output.splitlines() if line.startswith("FAIL")]
    assert len(failures) == 2 and "is not reachable" in failures[0] and "ZeroDivisionError" in failures[1]
    assert "Traceback" not in result.output


def test_invalid_settings_are_one_failed_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPANION_TIMEZONE", "Mars/Base")
    result = CliRunner().invoke(cli, ["doctor"])
    assert result.exit_code == 1 and result.output.startswith("FAIL  settings:") and "Mars/Base" in result.output
