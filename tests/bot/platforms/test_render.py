"""Splitting replies at a platform limit on natural boundaries."""

from __future__ import annotations

import pytest

from bot.platforms.render import TELEGRAM_LIMIT, split_message, units


def test_short_text_is_one_chunk() -> None:
    assert split_message("hello") == ["hello"]
    assert split_message("   ") == []


@pytest.mark.parametrize("limit", [10, 50, 200, TELEGRAM_LIMIT])
def test_every_chunk_fits_and_no_word_is_lost(limit: int) -> None:
    text = " ".join(f"word{i}" for i in range(3000))
    chunks = split_message(text, limit)
    assert all(0 < units(chunk) <= limit for chunk in chunks)
    assert " ".join(chunks).split() == text.split()  # no word cut in half, none lost


def test_paragraphs_are_preferred_over_lines_and_sentences() -> None:
    first = "A" * 30 + ". " + "b" * 30
    text = f"{first}\n\nsecond paragraph here."
    assert split_message(text, 70) == [first, "second paragraph here."]


def test_sentences_are_preferred_over_words() -> None:
    text = "This is one sentence. And this is another one that goes on"
    assert split_message(text, 40) == ["This is one sentence.", "And this is another one that goes on"]


def test_cjk_sentence_ends_are_boundaries() -> None:
    text = "主人今天过得怎么样？" * 10
    chunks = split_message(text, 25)
    assert all(chunk.endswith("？") for chunk in chunks)
    assert "".join(chunks) == text


def test_an_unbroken_word_longer_than_the_limit_is_cut_hard_without_losing_characters() -> None:
    text = "x" * 25
    assert split_message(text, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_limit_counts_utf16_units_like_telegram() -> None:
    text = "😀" * 10  # each emoji is two UTF-16 units
    chunks = split_message(text, 8)
    assert chunks == ["😀" * 4, "😀" * 4, "😀" * 2]


def test_markup_from_the_model_is_kept_verbatim() -> None:
    text = "*bold_ [link](x) `code"
    assert split_message(text) == [text]
