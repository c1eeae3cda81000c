"""Operator rules: which persona speaks where, who may talk, where every message is answered."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from bot.cli.main import cli
from bot.routing import PersonaChoices, PlaceRules, Router

SERVER, CHANNEL, THREAD = 1, 2, 3


def test_the_most_specific_place_with_a_persona_wins() -> None:
    rules = PlaceRules(personas={SERVER: "server-wide", CHANNEL: "channel-only"})
    assert rules.persona_for([THREAD, CHANNEL, SERVER]) == "channel-only"
    assert rules.persona_for([99, SERVER]) == "server-wide"
    assert rules.persona_for([]) is None


def test_allow_lists_limit_users_and_places_and_direct_messages_separately() -> None:
    open_to_all = PlaceRules()
    assert open_to_all.allows(7, [CHANNEL, SERVER], direct=False) and open_to_all.allows(7, [], direct=True)
    only_bob = PlaceRules(allowed_users=[8])
    assert not only_bob.allows(7, [], direct=True) and only_bob.allows(8, [CHANNEL, SERVER], direct=False)
    one_server = PlaceRules(allowed_places=[SERVER])
    assert one_server.allows(7, [CHANNEL, SERVER], direct=False)
    assert not one_server.allows(7, [CHANNEL, 99], direct=False)
    assert one_server.allows(7, [], direct=True)  # the place list says nothing about DMs
    assert not PlaceRules(direct_messages=False).allows(7, [], direct=True)


def test_persona_choices_beat_the_config_and_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "discord-personas.json"
    router = Router(PlaceRules(personas={SERVER: "configured"}), PersonaChoices(path), "default")
    assert router.persona_for([CHANNEL, SERVER]) == "configured"
    assert router.persona_for([77]) == "default"
    router.choices.set(CHANNEL, "chosen")
    assert Router(router.rules, PersonaChoices(path), "default").persona_for([CHANNEL, SERVER]) == "chosen"
    router.choices.set(CHANNEL, None)
    assert PersonaChoices(path).get([CHANNEL]) is None


def test_a_broken_choices_file_is_an_error_that_names_it(tmp_path: Path) -> None:
    path = tmp_path / "discord-personas.json"
    path.write_text("[1, 2", encoding="utf-8")
    with pytest.raises(ValueError, match="discord-personas.json"):
        PersonaChoices(path)


def test_rules_are_read_from_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.config import load_settings

    config = tmp_path / "companion.toml"
    config.write_text(
        '[discord]\npersonas = { 42 = "xiaoxiang" }\nevery_message = [42]\n\n'
        "[telegram]\nallowed_users = [7]\ndirect_messages = false\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("COMPANION_CONFIG", str(config))
    settings = load_settings()
    assert settings.discord.personas == {42: "xiaoxiang"} and settings.discord.every_message == [42]
    assert settings.telegram.allowed_users == [7] and not settings.telegram.direct_messages


def test_a_typo_in_the_rules_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "companion.toml"
    config.write_text("[discord]\nevery_messages = [42]\n", encoding="utf-8")
    monkeypatch.setenv("COMPANION_CONFIG", str(config))
    result = CliRunner().invoke(cli, ["memory", "list", "--persona", "xiaoxiang", "--user", "alice"])
    assert result.exit_code == 1 and "discord.every_messages" in result.output


def test_run_with_a_discord_token_but_no_connection_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMPANION_DISCORD_TOKEN", "not-a-real-token")
    monkeypatch.setenv("COMPANION_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    result = CliRunner().invoke(cli, ["run"])
    assert result.exit_code == 1
    assert "Discord" in result.output, result.output
