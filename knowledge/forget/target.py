"""What a forget is about, as text: the test every store applies to decide what to erase.

"Forget my passport number ZQX-4471" means every message and memory that carries that number, whatever
words surround it ("my passport number is ZQX-4471-SECRET"), so a phrase is matched by its distinctive
content, in this order of strength:
- codes (tokens with digits, like ZQX-4471 or 4471-9913): any one of them is enough;
- names (capitalised words that are not stopwords, like Tom or Mochi): all of them must appear;
- otherwise its content words (English, stemmed: "spiders" meets "spider"): all of them must appear;
- and always the phrase itself, literally (with or without a leading "my"/"我的").
Meaning (embedding similarity) is the search engine's part, for memories (`retrieval.memories_about`).

A target made from stored texts (a memory forgotten by id, a message deleted on its platform) matches
those texts and the codes they carry, never their ordinary words: forgetting "Alice has 2 cats and
loves Tom" must not erase every message about Tom.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from knowledge.search.lexical import ENGLISH_STOPWORDS, mentions, tokenize

# Latin tokens, codes kept whole across - _ . / @ ("ZQX-4471-SECRET", "a.b@c.io").
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[-_./@][A-Za-z0-9]+)*")
_FIRST_PERSON = re.compile(r"^(?:(?:my|i'm|i am|i)\s+|我的|我(?!们))", re.IGNORECASE)
MIN_TEXT_CHARS = 8  # a stored text shorter than this ("ok", "haha") is matched by its id only, never as text
REDACTED = "[forgotten]"


def _is_code(token: str) -> bool:
    """A number or code distinctive enough to stand for what it is in: letters with digits, or 4+ digits."""
    digits = sum(char.isdigit() for char in token)
    return digits > 0 and (digits >= 4 or digits < len(token.replace("-", "").replace(".", "")))


def _is_name(token: str) -> bool:
    return token[0].isupper() and token.isalpha() and len(token) >= 2 and token.lower() not in ENGLISH_STOPWORDS


@lru_cache(maxsize=64)
def _any_of(literals: frozenset[str]) -> re.Pattern[str] | None:
    """One pattern for "mentions any of these" (as `mentions` means it): a forget tests thousands of texts."""
    if not literals:
        return None
    alternatives = []
    for literal in sorted(literals, key=len, reverse=True):
        start = r"(?<![A-Za-z0-9])" if literal[0].isascii() and literal[0].isalnum() else ""
        end = r"(?![A-Za-z0-9])" if literal[-1].isascii() and literal[-1].isalnum() else ""
        alternatives.append(start + re.escape(literal) + end)
    return re.compile("|".join(alternatives), re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class _Rule:
    """One phrase's (or one set of texts') rule."""

    phrases: frozenset[str] = frozenset()  # any one, literally
    codes: frozenset[str] = frozenset()  # any one
    names: frozenset[str] = frozenset()  # all of them
    keywords: frozenset[str] = frozenset()  # all of them, as stemmed search terms (only without codes and names)

    def matches(self, flat: str) -> bool:
        literal = _any_of(self.phrases | self.codes)
        if literal is not None and literal.search(flat):
            return True
        if self.names:
            return all(mentions(flat, name) for name in self.names)
        if self.keywords and not self.codes:
            return self.keywords <= set(tokenize(flat))
        return False

    def needles(self) -> list[str]:
        """Substrings every match contains one of; [] when a match need not contain any fixed one."""
        if self.names:
            return [min(self.names, key=len), *self.phrases, *self.codes]
        if self.keywords and not self.codes:
            return []
        return [*self.phrases, *self.codes]


@dataclass(frozen=True, slots=True)
class ForgetTarget:
    """The texts one forget erases: whatever one of its rules matches."""

    rules: tuple[_Rule, ...] = ()

    @classmethod
    def of_phrase(cls, phrase: str) -> ForgetTarget:
        """What the user means by "forget <phrase>"."""
        phrase = phrase.strip()
        core = _FIRST_PERSON.sub("", phrase).strip()
        tokens = _TOKEN.findall(phrase)
        codes = frozenset(token for token in tokens if _is_code(token))
        names = frozenset(token for token in tokens if _is_name(token))
        latin_words = " ".join(token for token in tokens if token.isalpha())
        keywords = frozenset(term for term in tokenize(latin_words) if len(term) >= 3)
        phrases = frozenset(filter(None, {phrase, core if len(core) >= 2 else ""}))
        return cls((_Rule(phrases, codes, names, keywords),))

    @classmethod
    def of_texts(cls, texts: Iterable[str]) -> ForgetTarget:
        """What forgetting these stored texts (memories, messages) erases elsewhere: them, and their codes."""
        kept = {" ".join(text.split()) for text in texts}
        codes = frozenset(token for text in kept for token in _TOKEN.findall(text) if _is_code(token))
        phrases = frozenset(text for text in kept if len(text) >= MIN_TEXT_CHARS)
        return cls((_Rule(phrases, codes),)) if phrases or codes else cls()

    def __or__(self, other: ForgetTarget) -> ForgetTarget:
        """A target matching what either matches."""
        return ForgetTarget(self.rules + other.rules)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def matches(self, text: str) -> bool:
        """Whether `text` carries what is being forgotten."""
        if not text or not self.rules:
            return False
        flat = " ".join(text.split())
        return any(rule.matches(flat) for rule in self.rules)

    def needles(self) -> list[str] | None:
        """Substrings every match contains one of, for a first cut in SQL; None when there is no such list."""
        found: list[str] = []
        for rule in self.rules:
            needles = rule.needles()
            if not needles:
                return None
            found += needles
        return found

    def redacted(self, value: Any) -> Any:
        """A JSON-like value with every string that matches replaced by a placeholder."""
        if isinstance(value, str):
            return REDACTED if self.matches(value) else value
        if isinstance(value, list):
            return [self.redacted(item) for item in value]
        if isinstance(value, dict):
            return {key: self.redacted(item) for key, item in value.items()}
        return value

    def matches_serialized(self, serialized: str) -> bool:
        """Whether a stored JSON document carries a match (decoded first, so no escape hides one)."""
        try:
            document = json.loads(serialized)
        except ValueError:
            return self.matches(serialized)
        return bool(self.redacted(document) != document)


NOTHING = ForgetTarget()
