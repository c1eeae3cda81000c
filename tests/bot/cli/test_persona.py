"""`companion persona …`: list, show, validate, and import Character Cards from JSON and PNG."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from bot.cli.main import cli
from personas.loader import PERSONA_DIR, PersonaRegistry
from tests.fakes.cards import card_png, card_v2, card_v3


@pytest.fixture
def persona_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "personas"
    directory.mkdir()
    shutil.copy(PERSONA_DIR / "xiaoxiang.yaml", directory)
    monkeypatch.setenv("COMPANION_PERSONA_DIR", str(directory))
    return directory


def test_import_a_v2_json_card_then_list_and_show_it(runner: CliRunner, persona_dir: Path, tmp_path: Path) -> None:
    card = tmp_path / "marin.json"
    card.write_text(json.dumps(card_v2()), encoding="utf-8")
    result = runner.invoke(cli, ["persona", "import", str(card)])
    assert result.exit_code == 0, result.output
    assert "imported Marin Voss as marin-voss" in result.output and "2 greetings, 2 lore entries" in result.output
    assert PersonaRegistry(persona_dir).get("marin-voss").lorebook is not None

    listed = json.loads(runner.invoke(cli, ["persona", "list", "--json"]).output)
    assert [row["id"] for row in listed] == ["marin-voss", "xiaoxiang"]
    prompt = runner.invoke(cli, ["persona", "show", "marin-voss", "--prompt", "Alice"]).output
    assert "Alice meets Marin Voss on the pier." in prompt
    shown = json.loads(runner.invoke(cli, ["persona", "show", "marin-voss", "--json"]).output)
    assert shown["card"]["data"]["creator"] == "someone"


def test_import_a_v3_png_card_under_a_chosen_id(runner: CliRunner, persona_dir: Path, tmp_path: Path) -> None:
    card = tmp_path / "marin.png"
    card.write_bytes(card_png(card_v3(), "ccv3"))
    result = runner.invoke(cli, ["persona", "import", str(card), "--id", "marin"])
    assert result.exit_code == 0, result.output
    persona = PersonaRegistry(persona_dir).get("marin")
    assert persona.card["spec"] == "chara_card_v3" and persona.card["data"]["nickname"] == "Marin"

    again = runner.invoke(cli, ["persona", "import", str(card), "--id", "marin"])
    assert again.exit_code == 1 and "exists; choose another --id, or --force" in again.output
    forced = runner.invoke(cli, ["persona", "import", str(card), "--id", "marin", "--force"])
    assert forced.exit_code == 0 and (persona_dir / "marin.yaml.bak").exists()


def test_a_bad_card_is_refused_with_its_reason(runner: CliRunner, persona_dir: Path, tmp_path: Path) -> None:
    card = tmp_path / "photo.png"
    card.write_bytes(card_png({"not": "a card"}, "Comment"))
    result = runner.invoke(cli, ["persona", "import", str(card)])
    assert result.exit_code == 1 and "photo.png: this PNG holds no character card" in result.output
    assert sorted(path.name for path in persona_dir.iterdir()) == ["xiaoxiang.yaml"]


def test_validate_names_the_file_and_field_of_each_problem(runner: CliRunner, persona_dir: Path) -> None:
    assert runner.invoke(cli, ["persona", "validate"]).output == "ok      xiaoxiang.yaml\n"
    (persona_dir / "mia.yaml").write_text(
        "id: mia\nname: Mia\npersonality: kind\ngreetings: [hi]\nmemory_rules: {fact_factor: 2}\n"
    )
    (persona_dir / "zed.yaml").write_text("id: zed\nname: Zed\ngreetings: [hi]\n")
    result = runner.invoke(cli, ["persona", "validate"])
    assert result.exit_code == 1
    assert "BROKEN  mia.yaml: memory_rules: fact_factor must be above 0 and at most 1" in result.output
    assert (
        "BROKEN  zed.yaml: personality: missing" in result.output and "2 of 3 persona files are broken" in result.output
    )
    listed = runner.invoke(cli, ["persona", "list"]).output
    assert "zed                  BROKEN: zed.yaml: personality: missing" in listed


def test_an_import_goes_to_the_data_directory_never_beside_the_code(
    runner: CliRunner, isolated: Path, tmp_path: Path
) -> None:
    card = tmp_path / "marin.json"
    card.write_text(json.dumps({**card_v2(), "data": {**card_v2()["data"], "name": "Xiaoxiang"}}), encoding="utf-8")
    bundled = sorted(path.name for path in PERSONA_DIR.glob("*.yaml"))

    refused = runner.invoke(cli, ["persona", "import", str(card)])
    assert refused.exit_code == 1 and "xiaoxiang.yaml exists" in refused.output  # the bundled one counts
    result = runner.invoke(cli, ["persona", "import", str(card), "--force"])
    assert result.exit_code == 0, result.output

    mine = isolated / "data" / "personas" / "xiaoxiang.yaml"
    assert mine.exists() and sorted(path.name for path in PERSONA_DIR.glob("*.yaml")) == bundled
    registry = PersonaRegistry(mine.parent, PERSONA_DIR)
    assert registry.path("xiaoxiang") == mine and registry.get("xiaoxiang").name == "Xiaoxiang"  # yours wins
    listed = json.loads(runner.invoke(cli, ["persona", "list", "--json"]).output)
    assert [(row["id"], row["file"]) for row in listed] == [("xiaoxiang", str(mine))]


GOOD_TOML = 'id = "{id}"\nname = "Good"\npersonality = "kind"\ngreetings = ["hi"]\n'


def test_toml_files_are_listed_validated_and_shown(runner: CliRunner, persona_dir: Path) -> None:
    (persona_dir / "good.toml").write_text(GOOD_TOML.format(id="good"), encoding="utf-8")
    listed = json.loads(runner.invoke(cli, ["persona", "list", "--json"]).output)
    assert [(row["id"], row["file"], row["error"]) for row in listed] == [
        ("good", str(persona_dir / "good.toml"), None),
        ("xiaoxiang", str(persona_dir / "xiaoxiang.yaml"), None),
    ]
    assert runner.invoke(cli, ["persona", "validate"]).output == "ok      good.toml\nok      xiaoxiang.yaml\n"
    assert "name: Good" in runner.invoke(cli, ["persona", "show", "good"]).output

    (persona_dir / "bad.toml").write_text('id = "bad"\nname = \n', encoding="utf-8")
    result = runner.invoke(cli, ["persona", "validate"])
    assert result.exit_code == 1 and "BROKEN  bad.toml: not valid TOML: Invalid value (at line 2" in result.output
    assert "Traceback" not in result.output and "1 of 3 persona files are broken" in result.output


def test_two_files_for_one_id_or_a_file_named_with_no_id_are_reported(runner: CliRunner, persona_dir: Path) -> None:
    (persona_dir / "good.toml").write_text(GOOD_TOML.format(id="good"), encoding="utf-8")
    (persona_dir / "good.yaml").write_text("id: good\nname: Good\npersonality: kind\ngreetings: [hi]\n")
    (persona_dir / "Mia Rose.toml").write_text(GOOD_TOML.format(id="mia"), encoding="utf-8")
    both = f"good.yaml and good.toml in {persona_dir} both define persona 'good'; keep one of them"
    unnamed = "Mia Rose: a persona file is named by its id, a lowercase ASCII slug"
    result = runner.invoke(cli, ["persona", "validate"])
    assert result.exit_code == 1 and f"BROKEN  {both}\n" in result.output and f"BROKEN  {unnamed}" in result.output
    listed = runner.invoke(cli, ["persona", "list"])
    assert listed.exit_code == 0 and f"good                 BROKEN: {both}\n" in listed.output
    assert f"Mia Rose             BROKEN: {unnamed}" in listed.output
    shown = runner.invoke(cli, ["persona", "show", "good"])
    assert shown.exit_code == 1 and both in shown.output


def test_a_forced_import_replaces_a_toml_file_of_the_same_id(
    runner: CliRunner, persona_dir: Path, tmp_path: Path
) -> None:
    (persona_dir / "marin.toml").write_text(GOOD_TOML.format(id="marin"), encoding="utf-8")
    card = tmp_path / "marin.json"
    card.write_text(json.dumps(card_v2()), encoding="utf-8")
    refused = runner.invoke(cli, ["persona", "import", str(card), "--id", "marin"])
    assert refused.exit_code == 1 and "marin.toml exists" in refused.output
    forced = runner.invoke(cli, ["persona", "import", str(card), "--id", "marin", "--force"])
    assert forced.exit_code == 0, forced.output
    assert sorted(path.name for path in persona_dir.glob("marin*")) == ["marin.toml.bak", "marin.yaml"]
    assert PersonaRegistry(persona_dir).get("marin").name == "Marin Voss"
