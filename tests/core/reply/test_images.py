"""Images: bounded, downscaled, upright and stripped of metadata before a model sees them; kept as words."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image as Picture

from core import phrasebook
from core.reply.images import ImageError, ImageLimits, check_size, clean_description, photo_text, prepare_image
from core.types import ChatMessage, Image
from tests.fakes.images import photo_bytes


def decoded(url: str) -> Picture.Image:
    prefix = "data:image/jpeg;base64,"
    assert url.startswith(prefix)
    return Picture.open(io.BytesIO(base64.b64decode(url[len(prefix) :])))


def test_a_large_photo_is_scaled_to_the_operators_side_keeping_its_shape() -> None:
    url = prepare_image(Image(photo_bytes(3000, 2000), "image/jpeg"), ImageLimits(max_side=1024))
    picture = decoded(url)
    assert picture.format == "JPEG" and picture.size == (1024, 683)


def test_a_small_photo_keeps_its_size() -> None:
    assert decoded(prepare_image(Image(photo_bytes(640, 480), "image/jpeg"), ImageLimits())).size == (640, 480)


def test_a_phone_photo_is_turned_upright_and_loses_its_metadata() -> None:
    exif = Picture.Exif()
    exif[0x0112] = 6  # orientation: rotate 90° clockwise to view
    exif[0x010F] = "PhoneMaker"
    sideways = photo_bytes(400, 300, exif=exif.tobytes())
    picture = decoded(prepare_image(Image(sideways, "image/jpeg"), ImageLimits()))
    assert picture.size == (300, 400)
    assert dict(picture.getexif()) == {}  # no maker, no location, nothing of the phone's


def test_transparency_becomes_white_not_black() -> None:
    png = photo_bytes(50, 50, fmt="PNG", transparent=True)
    picture = decoded(prepare_image(Image(png, "image/png"), ImageLimits())).convert("RGB")
    assert all(channel > 240 for channel in picture.getpixel((25, 25)))


def test_an_oversize_file_is_refused_with_its_size_and_the_limit() -> None:
    data = photo_bytes(800, 600)
    limits = ImageLimits(max_bytes=len(data) - 1)
    with pytest.raises(ImageError) as refused:
        prepare_image(Image(data, "image/jpeg"), limits)
    assert str(refused.value) == phrasebook.image_too_large(len(data), limits.max_bytes)
    with pytest.raises(ImageError):
        check_size(limits.max_bytes + 1, limits)  # adapters refuse before downloading
    check_size(limits.max_bytes, limits)


def test_a_file_that_is_no_image_or_too_many_pixels_is_refused_clearly() -> None:
    with pytest.raises(ImageError, match="couldn't open"):
        prepare_image(Image(b"%PDF-1.7 not a photo", "image/jpeg"), ImageLimits())
    buffer = io.BytesIO()
    Picture.new("1", (9000, 5000)).save(buffer, "PNG")  # a tiny file that unpacks into 45 megapixels
    with pytest.raises(ImageError, match="too many pixels"):
        prepare_image(Image(buffer.getvalue(), "image/png"), ImageLimits())


def test_a_photo_is_kept_in_the_conversation_as_its_description_and_caption() -> None:
    assert photo_text("look at my new cat", "A grey cat on a windowsill.") == (
        "[photo: A grey cat on a windowsill.] look at my new cat"
    )
    assert photo_text("", "A grey cat.") == "[photo: A grey cat.]"
    assert photo_text("look!", None) == "[photo] look!"
    assert clean_description("  A [grey]\ncat  ") == "A (grey) cat"
    assert clean_description(" \n") is None
    assert len(clean_description("word " * 200) or "") <= 301


def test_a_message_with_an_image_is_an_openai_image_part() -> None:
    message = ChatMessage("user", "look!", image_url="data:image/jpeg;base64,AAAA")
    assert message.as_openai() == {
        "role": "user",
        "content": [
            {"type": "text", "text": "look!"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
        ],
    }
    assert ChatMessage("user", "plain").as_openai() == {"role": "user", "content": "plain"}
