"""Per-user settings: defaults that protect the user, one row per scope, kept across restarts."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from knowledge.journal.user_settings import UserSettings, find_time_zone
from knowledge.records import Scope
from knowledge.rules.discretion import Audience
from tests.conftest import Backend


def test_sharing_is_off_until_the_user_turns_it_on_and_is_kept_across_a_restart(
    backend: Backend, alice: Scope, bob: Scope
) -> None:
    settings = UserSettings(backend.open())
    assert settings.shares_in_groups(alice) is False
    settings.set_shares_in_groups(alice, True)
    assert settings.shares_in_groups(alice) and not settings.shares_in_groups(bob)
    assert not settings.shares_in_groups(Scope("another", alice.user_id))  # a choice made with one persona
    settings.close()

    reopened = UserSettings(backend.open())
    assert reopened.shares_in_groups(alice)
    reopened.set_shares_in_groups(alice, False)
    assert not reopened.shares_in_groups(alice)


def test_forgetting_a_scope_brings_its_settings_back_to_the_defaults(
    backend: Backend, alice: Scope, bob: Scope
) -> None:
    settings = UserSettings(backend.open())
    settings.set_shares_in_groups(alice, True)
    settings.set_shares_in_groups(bob, True)
    assert settings.forget(alice) == 1
    assert not settings.shares_in_groups(alice) and settings.shares_in_groups(bob)
    assert settings.forget(alice) == 0


def test_the_audience_of_a_conversation_follows_the_users_switch(backend: Backend, alice: Scope) -> None:
    settings = UserSettings(backend.open())
    assert settings.audience(alice, "dm:cli:alice", group=False) == Audience()
    assert settings.audience(alice, "telegram:chat:-1001", group=True) == Audience(group_id="telegram:chat:-1001")
    settings.set_shares_in_groups(alice, True)
    assert settings.audience(alice, "telegram:chat:-1001", group=True).sees_everything


def test_a_database_made_before_a_setting_existed_gets_its_column(tmp_path: Path, alice: Scope) -> None:
    path = tmp_path / "companion.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE user_settings (persona_id TEXT NOT NULL, user_id TEXT NOT NULL,"
            " PRIMARY KEY (persona_id, user_id))"
        )
        db.execute("INSERT INTO user_settings VALUES (?, ?)", (alice.persona_id, alice.user_id))
    settings = UserSettings(path)
    assert not settings.shares_in_groups(alice)  # the row existed, the choice was never made
    settings.set_shares_in_groups(alice, True)
    assert settings.shares_in_groups(alice)


def test_a_time_zone_is_the_operators_default_until_the_user_chooses_one_per_scope(
    backend: Backend, alice: Scope, bob: Scope
) -> None:
    settings = UserSettings(backend.open(), default_time_zone=ZoneInfo("Asia/Shanghai"))
    assert settings.time_zone(alice) == ZoneInfo("Asia/Shanghai") and settings.chosen_time_zone(alice) is None
    settings.set_time_zone(alice, ZoneInfo("Europe/Berlin"))
    assert (
        settings.time_zone(alice) == ZoneInfo("Europe/Berlin") and settings.chosen_time_zone(alice) == "Europe/Berlin"
    )
    assert settings.time_zone(bob) == ZoneInfo("Asia/Shanghai")
    # where someone lives, told to one persona, is not known to another
    assert settings.chosen_time_zone(Scope("another", alice.user_id)) is None
    settings.set_shares_in_groups(alice, True)  # one setting does not touch the other
    assert settings.chosen_time_zone(alice) == "Europe/Berlin"
    settings.close()
    reopened = UserSettings(backend.open())
    assert reopened.time_zone(alice) == ZoneInfo("Europe/Berlin")
    reopened.forget(alice)
    assert reopened.chosen_time_zone(alice) is None and reopened.time_zone(alice) == ZoneInfo("UTC")


def test_an_old_settings_table_gains_the_time_zone_column(tmp_path: Path, alice: Scope) -> None:
    path = tmp_path / "companion.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE user_settings (persona_id TEXT NOT NULL, user_id TEXT NOT NULL, share_in_groups INTEGER,"
            " PRIMARY KEY (persona_id, user_id))"
        )
        db.execute("INSERT INTO user_settings VALUES (?, ?, 1)", (alice.persona_id, alice.user_id))
    settings = UserSettings(path)
    assert settings.shares_in_groups(alice) and settings.chosen_time_zone(alice) is None
    settings.set_time_zone(alice, ZoneInfo("America/New_York"))
    assert settings.time_zone(alice) == ZoneInfo("America/New_York") and settings.shares_in_groups(alice)


@pytest.mark.parametrize(
    ("name", "zone"),
    [
        ("Europe/Berlin", "Europe/Berlin"),
        ("europe/berlin", "Europe/Berlin"),
        ("  Asia/Shanghai ", "Asia/Shanghai"),
        ("shanghai", "Asia/Shanghai"),  # a city alone, when only one zone has it
        ("New York", "America/New_York"),
        ("UTC", "UTC"),
        ("Mars/Base", None),
        ("", None),
        ("../../etc/passwd", None),
        ("+08:00", None),
    ],
)
def test_time_zones_are_known_iana_names(name: str, zone: str | None) -> None:
    found = find_time_zone(name)
    assert (found.key if found else None) == zone
