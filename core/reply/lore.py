"""Lore selection: which lorebook entries go into a prompt, by the core rules of SillyTavern's world info.

An enabled entry fires when one of its keys appears in the last `scan_depth` messages (case-
insensitive unless the entry says otherwise; a `selective` entry also needs one of its secondary
keys), and a `constant` entry always does. The entries that fired share the book's token budget:
constant ones first, then by priority (highest first); once one does not fit, it and everything
below it are left out. The chosen ones are placed by `insertion_order`, lowest first.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence

from core.llm.client import count_tokens
from knowledge.search.lexical import mentions
from personas.lorebook import Lorebook, LoreEntry

log = logging.getLogger(__name__)
_SLASHED = re.compile(r"^/(?P<pattern>.+)/(?P<flags>[a-z]*)$", re.DOTALL)  # card editors write JS-style /key/i


def _matches(entry: LoreEntry, key: str, text: str) -> bool:
    key = key.strip()
    if not key:
        return False
    if entry.use_regex:
        flags = 0 if entry.case_sensitive else re.IGNORECASE
        if slashed := _SLASHED.match(key):
            key, flags = slashed["pattern"], re.IGNORECASE if "i" in slashed["flags"] else 0
        try:
            return re.search(key, text, flags) is not None
        except re.error:
            log.warning("lorebook key %r is not a valid regular expression; ignored", key)
            return False
    # `mentions` matches whole words at Latin-script edges, ignoring case: "cat" is not in "category".
    return mentions(text, key) and (not entry.case_sensitive or key in text)


def _fires(entry: LoreEntry, text: str) -> bool:
    if not entry.enabled:
        return False
    if entry.constant:
        return True
    if not any(_matches(entry, key, text) for key in entry.keys):
        return False
    if entry.selective and entry.secondary_keys:
        return any(_matches(entry, key, text) for key in entry.secondary_keys)
    return True


def _priority(entry: LoreEntry) -> int:
    return entry.insertion_order if entry.priority is None else entry.priority


def active_lore(
    book: Lorebook, recent: Sequence[str], *, budget: int, fill: Callable[[str], str] = str
) -> list[LoreEntry]:
    """The entries to insert for these recent messages (oldest first), within `budget` tokens.

    `fill` expands macros in an entry's content before its tokens are counted; the entries come back
    with their content filled, in insertion order.
    """
    text = "\n".join(recent[-book.scan_depth :])
    fired = [entry for entry in book.entries if _fires(entry, text)]
    chosen: list[tuple[int, LoreEntry]] = []
    room = min(book.token_budget, budget)
    for index, entry in sorted(enumerate(fired), key=lambda pair: (not pair[1].constant, -_priority(pair[1]))):
        content = fill(entry.content).strip()
        cost = count_tokens(content) + 1  # + the line break between entries
        if cost > room:
            break
        chosen.append((index, entry.model_copy(update={"content": content})))
        room -= cost
    return [entry for _, entry in sorted(chosen, key=lambda pair: (pair[1].insertion_order, pair[0]))]
