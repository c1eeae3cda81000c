"""Images made in memory for tests: photos as a phone would send them, and files that only pretend to be."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from PIL import Image as Picture

from core.types import Image


def photo_bytes(
    width: int = 1600, height: int = 1200, *, fmt: str = "JPEG", transparent: bool = False, **save: object
) -> bytes:
    """An image file of one grey colour (a grey cat, as far as the fake model is concerned)."""
    picture = (
        Picture.new("RGBA", (width, height), (128, 128, 128, 0))
        if transparent
        else Picture.new("RGB", (width, height), "grey")
    )
    buffer = io.BytesIO()
    picture.save(buffer, fmt, **save)
    return buffer.getvalue()


def make_photo(width: int = 1600, height: int = 1200) -> Image:
    """A JPEG photo as a platform delivers it."""
    return Image(photo_bytes(width, height), "image/jpeg")


def describing(reply: str, description: str) -> Callable[[dict[str, Any]], str]:
    """The chat model's answers for the fake server when a photo comes: `description` to the short call asking
    what the photo shows, `reply` to the conversation."""

    def answer(body: dict[str, Any]) -> str:
        asked_to_describe = str(body["messages"][0]["content"]).startswith("Describe the image")
        return description if asked_to_describe else reply

    return answer
