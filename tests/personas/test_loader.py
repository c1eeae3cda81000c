"""Persona files: the default one loads, broken ones say which file and field is wrong."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from personas.loader import PERSONA_DIR, PersonaError, PersonaRegistry, load_persona

GOOD = """\
id: {id}
name: Mia
personality: cheerful
greetings: [hi!]
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def test_the_default_persona_is_xiaoxiang() -> None:
    persona = PersonaRegistry().get("xiaoxiang")
    assert (persona.name, persona.user_title) == ("小祥", "主人")
    assert persona.greetings and persona.system_memories and persona.example_dialogue
    assert persona.lorebook is not None and persona.lorebook.entries and persona.models["chat"].temperature


def test_macros_name_the_character_and_how_it_addresses_the_user(tmp_path: Path) -> None:
    titled = PersonaRegistry().get("xiaoxiang")
    assert titled.fill("{{char}}想{{User}}了 <BOT>/<user>", "alice") == "小祥想主人了 小祥/主人"
    by_name = load_persona(write(tmp_path, "mia.yaml", GOOD.format(id="mia")))
    assert by_name.fill("Hi {{user}}, I'm {{char}}", "Alice") == "Hi Alice, I'm Mia"


def test_a_description_may_stand_in_for_the_personality(tmp_path: Path) -> None:
    text = "id: mia\nname: Mia\ndescription: a cheerful baker\ngreetings: [hi]\n"
    assert load_persona(write(tmp_path, "mia.yaml", text)).description == "a cheerful baker"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id: mia\nname: Mia\npersonality: kind\n", "mia.yaml: greetings: missing"),
        ("id: mia\nname: Mia\npersonality: kind\ngreetings: []\n", "mia.yaml: greetings: List should have at least 1"),
        ("id: mia\nname: Mia\npersonality: kind\ngreetings: ['  ']\n", "mia.yaml: greetings: entries must"),
        ("id: Mia Rose\nname: Mia\npersonality: kind\ngreetings: [hi]\n", "mia.yaml: id: must be a lowercase"),
        (GOOD.format(id="mia") + "colour: blue\n", "mia.yaml: colour: Extra inputs are not permitted"),
        (GOOD.format(id="other"), "mia.yaml: id: 'other' does not match the file name 'mia'"),
        ("id: mia\n  name: [unclosed\n", "mia.yaml: not valid YAML at line 2"),
        ("id: mia\nname: Mia\ngreetings: [hi]\n", "mia.yaml: personality: missing (give a personality, a description"),
        (
            GOOD.format(id="mia") + "models: {chatty: {model: x}}\n",
            "mia.yaml: models.chatty.[key]: Input should be 'chat'",
        ),
        (
            GOOD.format(id="mia") + "models: {chat: {temperature: 5}}\n",
            "mia.yaml: models.chat.temperature: Input should be less",
        ),
        (
            GOOD.format(id="mia") + "lorebook: {scan_depth: 0}\n",
            "mia.yaml: lorebook.scan_depth: Input should be greater",
        ),
        (
            GOOD.format(id="mia") + "lorebook: {entries: [{keys: [a]}]}\n",
            "mia.yaml: lorebook.entries.0.content: missing",
        ),
        ("- just\n- a list\n", "mia.yaml: expected a mapping"),
    ],
)
def test_broken_files_name_the_file_and_the_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(PersonaError) as caught:
        load_persona(write(tmp_path, "mia.yaml", text))
    assert str(caught.value).startswith(message)


def test_unknown_persona_lists_the_known_ones(tmp_path: Path) -> None:
    write(tmp_path, "mia.yaml", GOOD.format(id="mia"))
    with pytest.raises(PersonaError, match=r"unknown persona 'zed' \(known: mia\)"):
        PersonaRegistry(tmp_path).get("zed")


def test_a_changed_file_is_reloaded_within_a_second(tmp_path: Path) -> None:
    path = write(tmp_path, "mia.yaml", GOOD.format(id="mia"))
    seconds = [0.0]
    registry = PersonaRegistry(tmp_path, monotonic=lambda: seconds[0])
    assert registry.get("mia").name == "Mia"
    path.write_text(GOOD.format(id="mia").replace("Mia", "Mia Rose"), encoding="utf-8")
    os.utime(path, (path.stat().st_atime, path.stat().st_mtime + 5))
    seconds[0] = 0.5
    assert registry.get("mia").name == "Mia"  # the file is not looked at on every call
    seconds[0] = 1.0
    assert registry.get("mia").name == "Mia Rose"


def test_a_file_broken_while_in_use_falls_back_to_the_version_loaded_before(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, "mia.yaml", GOOD.format(id="mia"))
    registry = PersonaRegistry(tmp_path, recheck_after=0)
    assert registry.get("mia").name == "Mia"
    path.write_bytes(b"\xff\xfe\x00 half-saved")
    os.utime(path, (path.stat().st_atime, path.stat().st_mtime + 5))
    assert registry.get("mia").name == "Mia"
    assert registry.get("mia").name == "Mia"
    [warning] = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert "mia.yaml: not UTF-8 text" in warning and "still using the version loaded before" in warning
    path.write_text(GOOD.format(id="mia").replace("Mia", "Mia Rose"), encoding="utf-8")
    os.utime(path, (path.stat().st_atime, path.stat().st_mtime + 10))
    assert registry.get("mia").name == "Mia Rose"


def test_a_file_broken_before_it_was_ever_loaded_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "mia.yaml", "name: [unclosed\n")
    with pytest.raises(PersonaError, match="mia.yaml: not valid YAML"):
        PersonaRegistry(tmp_path).get("mia")


MIA_YAML = """\
id: mia
name: Mia
personality: cheerful
greetings: [hi!, hello]
example_dialogue:
  - {user: "How are you?", character: "Baking, as ever."}
models:
  chat: {model: big, temperature: 0.7}
memory_rules: {fact_factor: 0.9}
lorebook:
  entries:
    - {keys: [bakery], content: "Mia's bakery opens at six."}
"""

MIA_TOML = """\
id = "mia"
name = "Mia"
personality = "cheerful"
greetings = ["hi!", "hello"]
memory_rules = { fact_factor = 0.9 }

[[example_dialogue]]
user = "How are you?"
character = "Baking, as ever."

[models.chat]
model = "big"
temperature = 0.7

[[lorebook.entries]]
keys = ["bakery"]
content = "Mia's bakery opens at six."
"""


def test_a_toml_file_is_a_persona_as_the_same_fields_in_yaml(tmp_path: Path) -> None:
    (tmp_path / "yaml").mkdir()
    (tmp_path / "toml").mkdir()
    from_yaml = load_persona(write(tmp_path / "yaml", "mia.yaml", MIA_YAML))
    write(tmp_path / "toml", "mia.toml", MIA_TOML)
    from_toml = PersonaRegistry(tmp_path / "toml").get("mia")
    assert from_toml == from_yaml and from_toml.lorebook is not None and from_toml.models["chat"].model == "big"


def test_toml_files_are_listed_found_and_reloaded_like_yaml_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "mia.toml", MIA_TOML)
    write(tmp_path, "zed.yaml", GOOD.format(id="zed").replace("Mia", "Zed"))
    seconds = [0.0]
    registry = PersonaRegistry(tmp_path, monotonic=lambda: seconds[0])
    assert registry.ids() == ["mia", "zed"] and registry.path("mia") == path
    assert registry.get("mia").name == "Mia"
    path.write_text(MIA_TOML.replace('"Mia"', '"Mia Rose"'), encoding="utf-8")
    os.utime(path, (path.stat().st_atime, path.stat().st_mtime + 5))
    seconds[0] = 1.0
    assert registry.get("mia").name == "Mia Rose"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('id = "mia"\nname = \n', "mia.toml: not valid TOML: Invalid value (at line 2, column 8)"),
        ('id = "mia"\nname = "Mia"\npersonality = "kind"\n', "mia.toml: greetings: missing"),
        ('id = "other"\nname = "Mia"\npersonality = "kind"\ngreetings = ["hi"]\n', "mia.toml: id: 'other' does not"),
        ('id = "mia"\nname = "Mia"\npersonality = "kind"\ngreetings = "hi"\n', "mia.toml: greetings: Input should be"),
    ],
)
def test_broken_toml_files_name_the_file_and_the_problem_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path, "mia.toml", text)
    with pytest.raises(PersonaError) as caught:
        PersonaRegistry(tmp_path).get("mia")
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_file_of_another_kind_is_no_persona_file(tmp_path: Path) -> None:
    path = write(tmp_path, "mia.yml", GOOD.format(id="mia"))
    with pytest.raises(PersonaError, match=r"mia\.yml: not a persona file \(name it <id>\.yaml or <id>\.toml\)"):
        load_persona(path)
    assert PersonaRegistry(tmp_path).ids() == []


def test_two_files_for_one_id_are_an_error_not_a_choice(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path, "mia.yaml", GOOD.format(id="mia"))
    seconds = [0.0]
    registry = PersonaRegistry(tmp_path, monotonic=lambda: seconds[0])
    assert registry.get("mia").name == "Mia"
    write(tmp_path, "mia.toml", MIA_TOML.replace('"Mia"', '"Mia Rose"'))
    both = f"mia.yaml and mia.toml in {tmp_path} both define persona 'mia'; keep one of them"
    with pytest.raises(PersonaError, match=re.escape(both)):
        registry.path("mia")
    with pytest.raises(PersonaError, match=re.escape(both)):
        PersonaRegistry(tmp_path).get("mia")
    seconds[0] = 1.0
    assert registry.get("mia").name == "Mia"  # running: the version loaded before serves on, with a warning
    assert [record.getMessage() for record in caplog.records] == [f"{both}; still using the version loaded before"]
    (tmp_path / "mia.yaml").unlink()
    seconds[0] = 2.0
    assert registry.get("mia").name == "Mia Rose"


def test_your_toml_file_replaces_a_bundled_yaml_one_of_the_same_id(tmp_path: Path) -> None:
    mine = write(tmp_path, "xiaoxiang.toml", MIA_TOML.replace('"mia"', '"xiaoxiang"'))
    registry = PersonaRegistry(tmp_path, PERSONA_DIR)
    assert registry.path("xiaoxiang") == mine and registry.get("xiaoxiang").name == "Mia"


def test_the_toml_example_of_the_personas_guide_is_a_persona(tmp_path: Path) -> None:
    guide = (Path(__file__).parents[2] / "docs" / "guide" / "personas.md").read_text(encoding="utf-8")
    [example] = re.findall(r"```toml\n(.*?)```", guide, flags=re.DOTALL)
    persona = load_persona(write(tmp_path, "mia.toml", example))
    assert persona.example_dialogue and persona.lorebook is not None and persona.models["chat"].temperature == 0.8
