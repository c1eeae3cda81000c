"""Images people send: checked, bounded and downscaled before a vision model sees them, and written into
the conversation as words. The image itself is not kept: later turns, the history index and the
background monitor know a photo by the short description the chat model gave of it.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

from PIL import Image as Picture
from PIL import ImageOps, UnidentifiedImageError

from core import phrasebook
from core.errors import UserFacingError
from core.types import ChatMessage, Image

# Formats photos arrive in; anything else (a PDF renamed .jpg, an icon file) is refused with a clear answer.
ACCEPTED_FORMATS = frozenset({"JPEG", "PNG", "WEBP", "GIF", "BMP"})
# Above this many pixels an image is refused before it is decoded: a small file may unpack into gigabytes.
MAX_PIXELS = 40_000_000
JPEG_QUALITY = 85
DESCRIPTION_CHARS = 300


class ImageError(UserFacingError):
    """An image that cannot be shown to the model: too large, or not an image we can read."""


@dataclass(frozen=True, slots=True)
class ImageLimits:
    """What the operator allows: files larger than `max_bytes` are refused, larger sides scaled to `max_side`."""

    max_bytes: int = 10_000_000
    max_side: int = 1024


def check_size(size: int, limits: ImageLimits) -> None:
    """Refuse an image by its size alone (adapters call this before downloading it)."""
    if size > limits.max_bytes:
        raise ImageError(phrasebook.image_too_large(size, limits.max_bytes))


def prepare_image(image: Image, limits: ImageLimits) -> str:
    """The image as a JPEG data URL of at most `max_side` pixels a side, upright, without its metadata.

    Re-encoding also drops EXIF data (a phone photo's location) before anything leaves the process.
    """
    check_size(len(image.data), limits)
    try:
        with Picture.open(io.BytesIO(image.data)) as opened:
            if opened.format not in ACCEPTED_FORMATS:
                raise ImageError(phrasebook.IMAGE_UNREADABLE)
            if opened.width * opened.height > MAX_PIXELS:
                raise ImageError(phrasebook.image_too_large(len(image.data), limits.max_bytes, pixels=True))
            opened.draft("RGB", (limits.max_side, limits.max_side))  # JPEG: decode at reduced size, much faster
            upright = ImageOps.exif_transpose(opened)
            upright.thumbnail((limits.max_side, limits.max_side))
            flat = _on_white(upright)
    except (UnidentifiedImageError, Picture.DecompressionBombError, OSError, ValueError) as error:
        raise ImageError(phrasebook.IMAGE_UNREADABLE) from error
    buffer = io.BytesIO()
    flat.save(buffer, "JPEG", quality=JPEG_QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _on_white(picture: Picture.Image) -> Picture.Image:
    """RGB for JPEG: transparent parts (a PNG sticker, a screenshot's corners) over white, not black."""
    if picture.mode in ("RGBA", "LA") or (picture.mode == "P" and "transparency" in picture.info):
        rgba = picture.convert("RGBA")
        background = Picture.new("RGB", rgba.size, "white")
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return picture.convert("RGB")


def photo_text(caption: str, description: str | None) -> str:
    """How a photo is kept in the conversation: what it showed (when a model saw it), then its caption."""
    seen = f"[photo: {description}]" if description else "[photo]"
    return f"{seen} {caption}".strip()


def description_request(image_url: str, caption: str, language: str) -> list[ChatMessage]:
    """A short call asking the chat model what the photo shows, for the conversation's record."""
    instructions = (
        "Describe the image in one short sentence (at most 25 words) for a chat log, with the details "
        "someone may mention later: animals, people, objects, colours, any text. Write only the sentence, "
        f"in the language of the caption, or if there is none in the language with code '{language}'."
    )
    said = f"Caption: {caption}" if caption else "No caption."
    return [ChatMessage("system", instructions), ChatMessage("user", said, image_url=image_url)]


def clean_description(text: str) -> str | None:
    """The model's description as one line without brackets (they frame it in the record); None if empty."""
    line = " ".join(text.replace("[", "(").replace("]", ")").split())
    if len(line) > DESCRIPTION_CHARS:
        line = line[:DESCRIPTION_CHARS].rstrip() + "…"
    return line or None
