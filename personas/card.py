"""Character Card V2 / V3 import: a `.json` card, or a `.png` with the card in a text chunk.

A PNG holds the card as base64 JSON in a `tEXt` chunk: `chara` (V2) or `ccv3` (V3, preferred when
both are present). The card's fields map onto a `Persona`; whatever has no place there (`spec`,
`creator`, `tags`, `extensions`, fields of future versions) is kept under `card`, so nothing of the
card is lost.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from personas.loader import Persona, PersonaError, describe_errors

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CARD_CHUNKS = ("ccv3", "chara")  # in order of preference
FALLBACK_GREETING = "Hello, {{user}}."
# Card fields that become persona fields; every other field is kept under `card`.
_MAPPED = (
    "name",
    "description",
    "personality",
    "scenario",
    "first_mes",
    "alternate_greetings",
    "mes_example",
    "system_prompt",
    "post_history_instructions",
    "character_book",
)
# Older exporters copy the V1 fields to the top level beside `data`; `data` is what counts.
_V1_MIRRORS = ("name", "description", "personality", "scenario", "first_mes", "mes_example")


class CardError(PersonaError):
    """A card file cannot be read or does not describe a character."""


def png_text_chunks(image: bytes) -> dict[str, str]:
    """The `tEXt` chunks of a PNG image, keyword -> text."""
    chunks: dict[str, str] = {}
    offset = len(PNG_SIGNATURE)
    while offset + 8 <= len(image):
        length, kind = struct.unpack(">I4s", image[offset : offset + 8])
        if kind == b"IEND":
            break
        if kind == b"tEXt":
            keyword, _, text = image[offset + 8 : offset + 8 + length].partition(b"\0")
            chunks[keyword.decode("latin-1")] = text.decode("latin-1")
        offset += 12 + length  # length, type, data, CRC
    return chunks


def read_card(path: Path) -> dict[str, Any]:
    """The card JSON of a `.json` or `.png` card file."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise CardError(f"{path.name}: cannot be read ({error.strerror})") from error
    if raw.startswith(PNG_SIGNATURE):
        chunks = png_text_chunks(raw)
        keyword = next((name for name in CARD_CHUNKS if name in chunks), None)
        if keyword is None:
            raise CardError(f"{path.name}: this PNG holds no character card (no 'chara' or 'ccv3' text chunk)")
        try:
            raw = base64.b64decode(chunks[keyword], validate=True)
        except binascii.Error as error:
            raise CardError(f"{path.name}: the '{keyword}' chunk is not base64") from error
    try:
        card = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CardError(f"{path.name}: not a character card (neither PNG nor JSON: {error})") from error
    if not isinstance(card, dict):
        raise CardError(f"{path.name}: expected a JSON object")
    return card


def _slug(*candidates: str) -> str | None:
    """The first candidate that makes a usable persona id (a lowercase ASCII slug), if any."""
    for candidate in candidates:
        slug = re.sub(r"[^a-z0-9]+", "-", candidate.lower()).strip("-")[:64].rstrip("-")
        if slug:
            return slug
    return None


def persona_from_card(card: dict[str, Any], persona_id: str | None = None, *, source: str) -> Persona:
    """The persona a card describes. `source` is the card's file name: errors start with it, and the id
    is made from the character's name, else from the file name, unless `persona_id` is given."""
    data = card["data"] if isinstance(card.get("data"), dict) else card  # V1 cards have no `data`
    persona_id = persona_id or _slug(str(data.get("name") or ""), Path(source).stem)
    if persona_id is None:
        raise CardError(f"{source}: id: cannot be made from the name {data.get('name')!r}; choose one")
    fields: dict[str, Any] = {
        "id": persona_id,
        "name": data.get("name"),
        "greetings": [
            greeting
            for greeting in [data.get("first_mes", ""), *(data.get("alternate_greetings") or [])]
            if isinstance(greeting, str) and greeting.strip()
        ]
        or [FALLBACK_GREETING],
        "example_dialogue": data.get("mes_example"),
        "lorebook": data.get("character_book"),
    }
    for name in ("description", "personality", "scenario", "system_prompt", "post_history_instructions"):
        fields[name] = data.get(name)
    kept = {key: value for key, value in data.items() if key not in _MAPPED}
    if data is card:
        fields["card"] = kept
    else:
        envelope = {key: value for key, value in card.items() if key != "data" and key not in _V1_MIRRORS}
        fields["card"] = {**envelope, "data": kept}
    try:
        return Persona.model_validate({key: value for key, value in fields.items() if value not in (None, "", {})})
    except ValidationError as error:
        raise CardError(f"{source}: {describe_errors(error)}") from error
