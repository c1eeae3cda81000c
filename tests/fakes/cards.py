"""Character Card fixtures: V2 and V3 cards with a lorebook, and PNG images that carry them."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

LOREBOOK: dict[str, Any] = {
    "name": "Harbor lore",
    "scan_depth": 3,
    "token_budget": 200,
    "recursive_scanning": False,
    "extensions": {"editor": {"folded": True}},
    "entries": [
        {
            "keys": ["lighthouse"],
            "content": "The lighthouse on the cape has been dark since {{char}}'s father left.",
            "extensions": {"depth": 4},
            "enabled": True,
            "insertion_order": 20,
            "id": 1,
            "comment": "lighthouse",
            "vendor_weight": 7,  # a field no spec knows: must survive the import
        },
        {
            "keys": ["harbor"],
            "content": "{{char}} works at the harbor.",
            "extensions": {},
            "enabled": True,
            "insertion_order": 10,
            "constant": True,
        },
    ],
}


def card_v2(name: str = "Marin Voss", **overrides: Any) -> dict[str, Any]:
    """A complete Character Card V2, as SillyTavern exports it."""
    data = {
        "name": name,
        "description": "{{char}} is a sailor who talks to {{user}} about the sea.",
        "personality": "calm, dry humour",
        "scenario": "{{user}} meets {{char}} on the pier.",
        "first_mes": "Ahoy, {{user}}.",
        "mes_example": "<START>\n{{user}}: Is the sea rough today?\n{{char}}: Rough enough to be interesting.",
        "creator_notes": "Best with a warm model.",
        "system_prompt": "Write as {{char}}. {{original}}",
        "post_history_instructions": "Keep replies under three sentences.",
        "alternate_greetings": ["Back again, {{user}}?"],
        "character_book": LOREBOOK,
        "tags": ["sea", "slice of life"],
        "creator": "someone",
        "character_version": "1.2",
        "extensions": {"talkativeness": "0.5", "depth_prompt": {"prompt": "", "depth": 4}},
    }
    data.update(overrides)
    return {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}


def card_v3(name: str = "Marin Voss", **overrides: Any) -> dict[str, Any]:
    """A Character Card V3: V2's fields plus V3's own."""
    card = card_v2(name, **overrides)
    card["data"].update(
        nickname="Marin",
        group_only_greetings=["Everyone aboard?"],
        assets=[{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"}],
        creation_date=1700000000,
    )
    card["data"]["character_book"]["entries"][0]["use_regex"] = False
    return {**card, "spec": "chara_card_v3", "spec_version": "3.0"}


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_with_text(texts: dict[str, str]) -> bytes:
    """A 1x1 PNG with these `tEXt` chunks."""
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\xff\xff")
    chunks = [_chunk(b"IHDR", header)]
    chunks += [_chunk(b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1")) for key, value in texts.items()]
    chunks += [_chunk(b"IDAT", pixels), _chunk(b"IEND", b"")]
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunks)


def card_png(card: dict[str, Any], keyword: str) -> bytes:
    """A PNG carrying `card` the way card editors embed it (base64 JSON in a text chunk)."""
    return png_with_text({keyword: base64.b64encode(json.dumps(card).encode("utf-8")).decode("ascii")})
