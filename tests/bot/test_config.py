"""Settings: grouped by the part they configure, one environment name each, old names still read and named."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from bot.cli.main import cli
from bot.config import (
    ENDPOINT_BACKGROUND_WORKERS,
    LOCAL_BACKGROUND_WORKERS,
    ConfigError,
    load_settings,
    renamed_settings,
    settings_table,
)

OLD_NAMES = {
    "TELEGRAM_TOKEN": "COMPANION_TELEGRAM_TOKEN",
    "TELEGRAM_BASE_URL": "COMPANION_TELEGRAM_BASE_URL",
    "TELEGRAM_WEBHOOK_SECRET": "COMPANION_TELEGRAM_WEBHOOK_SECRET",
    "DISCORD_TOKEN": "COMPANION_DISCORD_TOKEN",
}


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The config file the settings read (written by the test)."""
    path = tmp_path / "companion.toml"
    monkeypatch.setenv("COMPANION_CONFIG", str(path))
    return path


def test_each_environment_name_is_ours_and_appears_once() -> None:
    names = [name for setting in settings_table() if setting.env for name in (setting.env, *setting.formerly)]
    assert len(names) == len(set(names))
    assert all(setting.env.startswith("COMPANION_") for setting in settings_table() if setting.env)
    assert {old: setting.env for setting in settings_table() for old in setting.formerly} == OLD_NAMES
    assert all(setting.description for setting in settings_table())


def test_settings_are_grouped_by_the_part_they_configure(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config.write_text(
        'rate_limit_per_minute = 3\n[llm]\nchat_model = "big"\n[discord]\nstreaming = false\n'
        'personas = { 42 = "xiaoxiang" }\n[checkins]\nmax_per_day = 2\n',
        encoding="utf-8",
    )
    for name, value in {
        "COMPANION_LLM_TIMEOUT": "5",
        "COMPANION_CHROMA_PORT": "9000",
        "COMPANION_MEMORY_MODE": "explicit",
        "COMPANION_TELEGRAM_WEBHOOK_PORT": "8441",
    }.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert (settings.llm.chat_model, settings.llm.timeout, settings.storage.chroma_port) == ("big", 5, 9000)
    assert (settings.memory.mode, settings.telegram.webhook_port) == ("explicit", 8441)
    assert not settings.discord.streaming and settings.discord.personas == {42: "xiaoxiang"}
    assert (settings.checkins.max_per_day, settings.rate_limit_per_minute) == (2, 3)
    assert renamed_settings() == []


def test_old_environment_names_still_work_and_each_is_named_once_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for old in OLD_NAMES:
        monkeypatch.setenv(old, f"from {old}")
    settings = load_settings()
    assert settings.telegram.token is not None and settings.telegram.token.get_secret_value() == "from TELEGRAM_TOKEN"
    assert settings.telegram.base_url == "from TELEGRAM_BASE_URL"
    assert settings.discord.token is not None and settings.discord.token.get_secret_value() == "from DISCORD_TOKEN"

    caplog.set_level(logging.WARNING)
    result = CliRunner().invoke(cli, ["memory", "list", "--persona", "xiaoxiang", "--user", "alice"])
    assert result.exit_code == 0, result.output
    notices = [record.getMessage() for record in caplog.records if "deprecated" in record.getMessage()]
    assert sorted(notices) == sorted(f"{old} is deprecated, use {new}" for old, new in OLD_NAMES.items())


def test_a_new_name_wins_over_its_old_one(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_TOKEN", "old")
    monkeypatch.setenv("COMPANION_TELEGRAM_TOKEN", "new")
    config.write_text('chat_model = "old"\n[llm]\nchat_model = "new"\n', encoding="utf-8")
    settings = load_settings()
    assert settings.telegram.token is not None and settings.telegram.token.get_secret_value() == "new"
    assert settings.llm.chat_model == "new"
    assert renamed_settings() == [
        "TELEGRAM_TOKEN is deprecated and ignored: COMPANION_TELEGRAM_TOKEN is set",
        f"{config}: chat_model is deprecated and ignored: [llm] chat_model is set",
    ]


def test_the_openai_names_of_the_ecosystem_are_read_without_a_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-ecosystem")
    settings = load_settings()
    assert settings.llm.base_url == "http://127.0.0.1:9/v1"
    assert settings.llm.api_key is not None and settings.llm.api_key.get_secret_value() == "sk-ecosystem"
    assert renamed_settings() == []

    monkeypatch.setenv("COMPANION_LLM_BASE_URL", "http://127.0.0.1:8/v1")
    assert load_settings().llm.base_url == "http://127.0.0.1:8/v1"


def test_the_flat_keys_of_old_config_files_still_work_and_are_named(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COMPANION_DATA_DIR")  # the environment would win
    config.write_text(
        'data_dir = "elsewhere"\nchat_model = "big"\nllm_timeout = 5\nmemory_mode = "explicit"\n'
        "telegram_streaming = false\n[telegram]\nallowed_users = [7]\n",
        encoding="utf-8",
    )
    settings = load_settings()
    assert (settings.storage.data_dir, settings.llm.chat_model, settings.llm.timeout) == (Path("elsewhere"), "big", 5)
    assert settings.memory.mode == "explicit" and not settings.telegram.streaming
    assert settings.telegram.allowed_users == [7]
    assert renamed_settings() == [
        f"{config}: chat_model is deprecated, use [llm] chat_model",
        f"{config}: llm_timeout is deprecated, use [llm] timeout",
        f"{config}: data_dir is deprecated, use [storage] data_dir",
        f"{config}: memory_mode is deprecated, use [memory] mode",
        f"{config}: telegram_streaming is deprecated, use [telegram] streaming",
    ]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[telegram]\ntoken = "123:ABC"\n', "COMPANION_TELEGRAM_TOKEN"),
        ('discord_token = "MTAx"\n', "COMPANION_DISCORD_TOKEN"),
        ('[llm]\napi_key = "sk-leaked"\n', "COMPANION_LLM_API_KEY"),
    ],
)
def test_a_secret_in_the_config_file_is_refused_under_any_name(config: Path, text: str, named: str) -> None:
    config.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=f"must not be in the config file; set it in the environment \\({named}\\)"):
        load_settings()


def test_a_config_file_named_but_missing_is_refused_not_ignored(config: Path) -> None:
    # ignored, it would drop every rule the operator wrote there (allow-lists among them) without a word
    with pytest.raises(ConfigError, match=f"COMPANION_CONFIG names {config}, which does not exist"):
        load_settings()
    config.write_text('[llm]\nchat_model = "from-file"\n', encoding="utf-8")
    assert load_settings().llm.chat_model == "from-file"


def test_without_a_config_file_named_a_missing_companion_toml_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COMPANION_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    assert load_settings().llm.chat_model == "gpt-4o-mini"


def test_an_invalid_value_names_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPANION_LLM_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match=r"llm\.timeout \(COMPANION_LLM_TIMEOUT\): Input should be a valid number"):
        load_settings()


@pytest.mark.parametrize(
    ("cron", "problem"),
    [("not a cron", "Wrong number of fields"), ("99 * * * *", "higher than the maximum value")],
)
def test_a_cron_line_the_scheduler_would_refuse_is_refused_by_every_command(
    config: Path, monkeypatch: pytest.MonkeyPatch, cron: str, problem: str
) -> None:
    config.write_text(f'[memory]\ndecay_cron = "{cron}"\n', encoding="utf-8")
    named = rf"memory\.decay_cron \(COMPANION_DECAY_CRON\): invalid decay cron '{re.escape(cron)}': .*{problem}"
    with pytest.raises(ConfigError, match=named):
        load_settings()
    doctor = CliRunner().invoke(cli, ["doctor"])
    assert doctor.exit_code == 1 and doctor.output.count("\n") == 1
    assert re.match(rf"FAIL  settings: invalid settings: {named}", doctor.output)
    monkeypatch.setenv("COMPANION_DECAY_CRON", "30 3 * * sun")  # the environment wins over the file
    assert load_settings().memory.decay_cron == "30 3 * * sun"


def test_background_jobs_at_once_are_sized_by_the_endpoint_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().background_concurrency == LOCAL_BACKGROUND_WORKERS  # the embedded model
    monkeypatch.setenv("COMPANION_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    assert load_settings().background_concurrency == ENDPOINT_BACKGROUND_WORKERS
    monkeypatch.setenv("COMPANION_BACKGROUND_WORKERS", "3")
    assert load_settings().background_concurrency == 3
