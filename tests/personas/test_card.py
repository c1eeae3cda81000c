"""Character Card V2/V3 import: JSON and PNG cards become personas, and nothing of the card is lost."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from personas.card import CardError, persona_from_card, png_text_chunks, read_card
from personas.loader import load_persona, persona_yaml
from tests.fakes.cards import LOREBOOK, card_png, card_v2, card_v3, png_with_text


def write(path: Path, content: bytes | str) -> Path:
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return path


def test_a_v2_json_card_maps_onto_the_persona_fields(tmp_path: Path) -> None:
    persona = persona_from_card(read_card(write(tmp_path / "marin.json", json.dumps(card_v2()))), source="marin.json")
    assert (persona.id, persona.name, persona.personality) == ("marin-voss", "Marin Voss", "calm, dry humour")
    assert persona.greetings == ["Ahoy, {{user}}.", "Back again, {{user}}?"]
    assert persona.scenario == "{{user}} meets {{char}} on the pier."
    assert persona.example_dialogue == card_v2()["data"]["mes_example"]
    assert persona.system_prompt.startswith("Write as {{char}}")
    assert persona.post_history_instructions == "Keep replies under three sentences."
    assert persona.user_title is None  # cards address the user by name
    assert persona.fill("{{char}} waves at {{user}}", "Alice") == "Marin Voss waves at Alice"


def test_unknown_fields_and_extensions_are_kept(tmp_path: Path) -> None:
    original = card_v3()
    persona = persona_from_card(copy.deepcopy(original), source="marin.json")
    kept = persona.card["data"]
    assert persona.card["spec"] == "chara_card_v3" and persona.card["spec_version"] == "3.0"
    for field in ("extensions", "tags", "creator", "creator_notes", "nickname", "group_only_greetings", "assets"):
        assert kept[field] == original["data"][field]
    book = persona.lorebook
    assert book is not None and book.scan_depth == 3 and book.extensions == LOREBOOK["extensions"]
    lighthouse = book.entries[0]
    assert lighthouse.extensions == {"depth": 4} and lighthouse.model_extra == {"vendor_weight": 7}


def test_the_written_yaml_loads_back_as_the_same_persona(tmp_path: Path) -> None:
    persona = persona_from_card(card_v3(), source="marin.png")
    path = write(tmp_path / f"{persona.id}.yaml", persona_yaml(persona))
    assert "example_dialogue: |" in path.read_text(encoding="utf-8")  # multi-line text stays readable
    reloaded = load_persona(path)
    assert reloaded == persona
    # every lorebook field the card set is still set, so the book can be written back as it came
    assert reloaded.lorebook is not None
    book = reloaded.lorebook.model_dump(exclude_unset=True)
    assert {**book, "entries": None} == {**LOREBOOK, "entries": None}
    assert book["entries"] == [{**LOREBOOK["entries"][0], "use_regex": False}, LOREBOOK["entries"][1]]


@pytest.mark.parametrize(("keyword", "make"), [("chara", card_v2), ("ccv3", card_v3)])
def test_png_cards_are_read_from_their_text_chunk(tmp_path: Path, keyword: str, make) -> None:  # type: ignore[no-untyped-def]
    card = read_card(write(tmp_path / "card.png", card_png(make(), keyword)))
    assert card == make()


def test_a_png_with_both_chunks_uses_the_v3_one(tmp_path: Path) -> None:
    v2, v3 = card_png(card_v2("Old Marin"), "chara"), card_png(card_v3("New Marin"), "ccv3")
    texts = {**png_text_chunks(v2), **png_text_chunks(v3)}
    card = read_card(write(tmp_path / "both.png", png_with_text(texts)))
    assert card["data"]["name"] == "New Marin"


def test_a_v1_card_without_data_still_imports() -> None:
    v1 = {"name": "Old Salt", "description": "an old sailor", "first_mes": "Hm.", "mes_example": "", "avatar": "none"}
    persona = persona_from_card(v1, source="salt.json")
    assert (persona.id, persona.description, persona.greetings, persona.card) == (
        "old-salt",
        "an old sailor",
        ["Hm."],
        {"avatar": "none"},
    )


def test_ids_come_from_the_name_then_the_file_name_or_must_be_given() -> None:
    assert persona_from_card(card_v2("小祥"), source="xiao-card.png").id == "xiao-card"
    assert persona_from_card(card_v2("小祥"), "xiaoxiang2", source="x.png").id == "xiaoxiang2"
    with pytest.raises(CardError, match=r"小祥\.png: id: cannot be made from the name '小祥'"):
        persona_from_card(card_v2("小祥"), source="小祥.png")


def test_a_card_without_greeting_gets_a_plain_one() -> None:
    persona = persona_from_card(card_v2(first_mes="", alternate_greetings=[]), source="marin.json")
    assert persona.greetings == ["Hello, {{user}}."]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (png_with_text({"Title": "just a picture"}), "card.png: this PNG holds no character card"),
        (png_with_text({"chara": "not base64!!"}), "card.png: the 'chara' chunk is not base64"),
        (b"\x00\x01binary junk", "card.png: not a character card"),
        ("[1, 2]", "card.png: expected a JSON object"),
    ],
)
def test_unreadable_cards_say_why(tmp_path: Path, content: bytes | str, message: str) -> None:
    with pytest.raises(CardError, match="^" + message.replace(".", r"\.")):
        read_card(write(tmp_path / "card.png", content))


def test_a_card_that_makes_no_valid_persona_names_the_field() -> None:
    with pytest.raises(CardError, match=r"^marin\.json: personality: missing \(give a personality"):
        persona_from_card(card_v2(description="", personality=""), source="marin.json")
    with pytest.raises(CardError, match=r"^marin\.json: lorebook\.entries\.0\.content: missing"):
        persona_from_card(card_v2(character_book={"entries": [{"keys": ["x"]}]}), source="marin.json")
