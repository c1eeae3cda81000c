"""Rendering replies for chat platforms: splitting long text at natural boundaries, as plain text.

Replies are sent without any parse mode, so nothing the model writes (stray `*`, `_`, `[`) can break
MarkdownV2 or HTML formatting: plain text is the one format that is always valid.
"""

from __future__ import annotations

import re

TELEGRAM_LIMIT = 4096
DISCORD_LIMIT = 2000

# Preferred cut points, best first: paragraph, line, sentence end, then any whitespace.
_BOUNDARIES = (
    re.compile(r"\n\s*\n"),
    re.compile(r"\n"),
    re.compile(r"(?<=[.!?…])\s+|(?<=[。！？；])"),
    re.compile(r"\s+"),
)


def units(text: str) -> int:
    """Length as Telegram counts it (UTF-16 code units): an emoji outside the BMP counts twice."""
    return len(text.encode("utf-16-le")) // 2


def _fitting_prefix(text: str, limit: int) -> int:
    """The largest index i such that text[:i] is at most `limit` UTF-16 units long."""
    if units(text) <= limit:
        return len(text)
    count = 0
    for index, char in enumerate(text):
        count += 2 if ord(char) > 0xFFFF else 1
        if count > limit:
            return index
    return len(text)


def _cut(window: str) -> tuple[int, int]:
    """Where to end this chunk and where the next one starts, inside `window` (text past it is longer)."""
    for pattern in _BOUNDARIES:
        matches = [match for match in pattern.finditer(window) if match.start() > 0]
        # A boundary in the first half would leave a tiny chunk; try a finer boundary instead.
        good = [match for match in matches if match.start() >= len(window) // 2]
        if good:
            last = good[-1]
            return last.start(), last.end()
    return len(window), len(window)  # one unbroken word longer than the limit: cut it hard


def split_message(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Split `text` into chunks of at most `limit` units, on paragraph, line, sentence or word boundaries.

    Whitespace at a cut is dropped; chunks are never empty. Blank text gives no chunks.
    """
    chunks: list[str] = []
    rest = text.strip()
    while rest:
        chunk, rest = first_chunk(rest, limit)
        chunks.append(chunk)
    return chunks


def first_chunk(text: str, limit: int) -> tuple[str, str]:
    """The first chunk `split_message` makes of `text` (stripped), and the text after it.

    The cut depends only on the first `limit` + 1 units, so a reply still being written is cut where
    the whole reply will be.
    """
    if limit < 1:
        raise ValueError("limit must be positive")
    text = text.strip()
    if units(text) <= limit:
        return text, ""
    end = _fitting_prefix(text, limit)
    # Look one character past the limit: a boundary right at the limit still counts.
    chunk_end, next_start = _cut(text[: end + 1])
    if chunk_end > end:  # a hard cut: keep every character
        chunk_end = next_start = end
    chunk = text[:chunk_end].rstrip()
    if not chunk:  # only possible with pathological whitespace; never loop forever
        chunk, next_start = text[:end], end
    return chunk, text[max(next_start, len(chunk)) :].lstrip()
