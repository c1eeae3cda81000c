"""Nightly consolidation: which facts the model is asked about, and what it may answer, as pure functions.

The rule: docs/concepts/memory.md#nightly-consolidation.

Once a night per active scope, code finds three kinds of candidate group among the scope's facts, and the
model is asked only about those:
- near-duplicates: facts close in meaning (cosine of their vectors) where one says nothing the other does
  not (but for "my", "I", "我": "my locker code is 4711" and "Alice's locker code is 4711"), or very close in
  meaning with most words in common, that disagree on no number or date ("Alice tried a pasta recipe" and
  "... a curry recipe" each say something the other does not); only pairs with one fact learned or changed
  since the last pass are compared, so a night costs the new facts times all, not all times all;
- first-person facts ("my locker code is 4711", "我的储物柜密码是4711"), stored as the user said them, which a
  prompt cannot tell from the character speaking;
- old, rarely used facts of one kind (close in meaning, learned where the others were) that are neither
  dated nor verified: ten of them or more, at least `COMPRESS_AGE` old, are folded into at most three in ten.
A fact is in one group at most. What the model answers is checked here too (`broken_rule`): only the ids it
was given, no id twice, every number of what it merges kept, in the language of the facts.

A fact written from others records them (their memory ids, then the messages they were learned from), so
a forget of any of them reaches it (`written_from_memories`). It is as visible as the least visible of its
sources (`merged_visibility`): a merge never carries a private fact into a group.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Literal

import numpy as np

from knowledge.records import MemoryRecord, Scope, derived_memory_id

GroupKind = Literal["duplicates", "first_person", "compress"]

DUPLICATE_SIMILARITY = 0.9  # cosine of two facts' vectors that may say the same thing, if one adds to the other
PARAPHRASE_SIMILARITY = 0.98  # ... or in other words, this close and with this share of words in common (Dice):
PARAPHRASE_OVERLAP = 0.5
KIND_SIMILARITY = 0.9  # cosine to a kind's first fact that puts a fact in that kind
COMPRESS_AGE = timedelta(days=30)  # a fact this old (since learned or changed) may be compressed
RARELY_USED = 1  # ... if it shaped no more replies than this
COMPRESS_MIN = 10  # the fewest facts of one kind worth compressing
COMPRESS_KEEP = 3 / 10  # ... into at most this share of them: ten into three
MAX_GROUP = 20  # the most facts one question to the model holds
MAX_GROUPS = 12  # the most questions one scope's night asks (the rest wait for the next night)
VECTOR_BLOCK = 1024  # rows of the similarity matrix computed at once

_LATIN = re.compile(r"[a-z0-9]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_NUMBER = re.compile(r"\d+")
_FIRST_PERSON_EN = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll|im)\b", re.IGNORECASE)
FIRST_PERSON_WORDS = frozenset({"i", "me", "my", "mine", "myself", "im", "m"})  # and any pair of characters with 我


@dataclass(frozen=True, slots=True)
class CandidateGroup:
    """Facts of one scope the model is asked about together, and what it is asked to do with them."""

    kind: GroupKind
    records: tuple[MemoryRecord, ...]

    @property
    def ids(self) -> list[str]:
        return [record.id for record in self.records]

    @property
    def most_kept(self) -> int:
        """How many facts the group may leave: fewer than it holds for a compression, as many otherwise."""
        return compressed_size(len(self.records)) if self.kind == "compress" else len(self.records)


def compressed_size(count: int) -> int:
    """How many facts `count` facts of one kind compress into at most: ten into three."""
    return max(1, math.ceil(count * COMPRESS_KEEP))


def night_of(now: datetime, hour: int) -> datetime:
    """The start of the latest consolidation night at or before `now`: today at `hour` UTC, else yesterday's."""
    today = datetime.combine(now.astimezone(UTC).date(), time(hour), tzinfo=UTC)
    return today if now >= today else today - timedelta(days=1)


def pass_name(scope: Scope) -> str:
    """The name a scope's nightly pass is claimed under: a hash, so the claims table names no user."""
    return "consolidation:" + hashlib.sha256(str(scope).encode()).hexdigest()[:16]


def merged_id(scope: Scope, source_ids: Iterable[str]) -> str:
    """The id of the fact written from `source_ids`: the same every time, so a re-run replaces what it wrote."""
    return derived_memory_id("consolidated", scope.persona_id, scope.user_id, *sorted(source_ids))


# -- what a fact says --------------------------------------------------------------------------------


def terms(text: str) -> frozenset[str]:
    """A fact's words: Latin words lowercased, and pairs of Chinese characters (Chinese has no spaces)."""
    lowered = text.lower()
    characters = _CJK.findall(lowered)
    pairs = {a + b for a, b in itertools.pairwise(characters)} or set(characters)
    return frozenset(_LATIN.findall(lowered)) | pairs


def numbers(text: str) -> frozenset[str]:
    """The numbers a fact says (codes, dates, amounts): a merge that drops one loses what the fact was for."""
    return frozenset(_NUMBER.findall(text))


def overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """The share of words two facts have in common (Dice): 1 for the same words, 0 for none."""
    return 2 * len(a & b) / (len(a) + len(b)) if a or b else 1.0


def is_chinese(text: str) -> bool:
    """Whether a text is written in Chinese (more Chinese characters than Latin words)."""
    return len(_CJK.findall(text)) > len(_LATIN.findall(text.lower()))


def first_person(text: str) -> bool:
    """Whether a fact speaks as the user ("my", "I'm", "我"): in a prompt it would read as the character's own."""
    english, chinese = _FIRST_PERSON_EN.search(text) is not None, "我" in text
    if english == chinese:  # neither (most facts: no need to tell the language), or both: the language decides
        return english
    return chinese if is_chinese(text) else english


def written_from_memories(record: MemoryRecord) -> bool:
    """Whether a memory was written from other memories (a merge or a compression names them as its sources)."""
    return any(source.startswith("mem_") for source in record.message_ids)


def merged_visibility(records: Sequence[MemoryRecord]) -> tuple[str | None, bool]:
    """Where a fact written from `records` may be used: (the group it counts as learned in, shared). Only as
    far as every source may be: one group if all were learned there, shared if all were; otherwise private."""
    groups = {record.learned_in for record in records}
    return (next(iter(groups)) if len(groups) == 1 else None), all(record.shared for record in records)


def consolidates(record: MemoryRecord) -> bool:
    """Whether a memory takes part at all: a fact that is still true (not an old value, not a review's subject)."""
    return record.category == "fact" and record.replaced_by is None and record.review_pending is None


# -- the candidate groups ----------------------------------------------------------------------------


def candidate_groups(
    records: Sequence[MemoryRecord], vectors: np.ndarray, now: datetime, since: datetime | None
) -> list[CandidateGroup]:
    """The groups to ask the model about tonight: near-duplicates, then first-person facts, then old rarely used
    facts to compress; a fact in one group at most, at most `MAX_GROUPS` groups. `vectors` are the records'
    unit vectors, row for row; `since`: the last pass (None: never, so every pair is compared)."""
    keep = [index for index, record in enumerate(records) if consolidates(record)]
    facts = [records[index] for index in keep]
    unit = np.asarray(vectors, dtype=np.float32)[keep] if keep else np.zeros((0, 1), dtype=np.float32)
    groups = duplicate_groups(facts, unit, since)
    taken = {record.id for group in groups for record in group.records}
    groups += first_person_groups([record for record in facts if record.id not in taken])
    taken |= {record.id for group in groups for record in group.records}
    free = [index for index, record in enumerate(facts) if record.id not in taken]
    groups += compression_groups([facts[index] for index in free], unit[free], now)
    return groups[:MAX_GROUPS]


def duplicate_groups(
    records: Sequence[MemoryRecord], vectors: np.ndarray, since: datetime | None
) -> list[CandidateGroup]:
    """Facts that may say the same thing, each group joined by pairs close in meaning and in words that agree
    on their numbers, dates and lifetime; a pair counts only if one of it is new since `since`."""
    fresh = [index for index, record in enumerate(records) if since is None or record.dated >= since]
    if len(records) < 2 or not fresh:
        return []
    words: dict[int, frozenset[str]] = {}  # of the facts in a close pair only: most facts are in none
    said: dict[int, frozenset[str]] = {}
    parent = list(range(len(records)))

    def root(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    for start in range(0, len(fresh), VECTOR_BLOCK):
        rows = fresh[start : start + VECTOR_BLOCK]
        close = np.argwhere(vectors[rows] @ vectors.T >= DUPLICATE_SIMILARITY)
        for row, other in close.tolist():
            one = rows[row]
            if one == other or root(one) == root(other):
                continue
            a, b = records[one], records[other]
            for index, record in ((one, a), (other, b)):
                if index not in said:
                    said[index], words[index] = numbers(record.content), terms(record.content)
            if (a.about, a.until) != (b.about, b.until) or not (said[one] <= said[other] or said[other] <= said[one]):
                continue  # a different date or number: a different fact (or a changed one), not a duplicate
            if _same_fact(words[one], words[other], float(vectors[one] @ vectors[other])):
                parent[root(one)] = root(other)
    joined: dict[int, list[MemoryRecord]] = {}
    for index, record in enumerate(records):
        joined.setdefault(root(index), []).append(record)
    found = [sorted(group, key=lambda record: record.created_at) for group in joined.values() if len(group) > 1]
    return [CandidateGroup("duplicates", tuple(group[:MAX_GROUP])) for group in found]


def _same_fact(a: frozenset[str], b: frozenset[str], similarity: float) -> bool:
    """Whether two facts close in meaning may say the same thing: one adds to the other (but for the words that
    speak as the user), or they are worded differently but nearly the same in meaning."""
    a, b = _not_first_person(a), _not_first_person(b)
    if not (a - b) or not (b - a):
        return True
    return similarity >= PARAPHRASE_SIMILARITY and overlap(a, b) >= PARAPHRASE_OVERLAP


def _not_first_person(words: frozenset[str]) -> frozenset[str]:
    return frozenset(word for word in words if word not in FIRST_PERSON_WORDS and "我" not in word)


def first_person_groups(records: Sequence[MemoryRecord]) -> list[CandidateGroup]:
    """First-person facts, `MAX_GROUP` to a question."""
    found = [record for record in records if first_person(record.content)]
    return [
        CandidateGroup("first_person", tuple(found[start : start + MAX_GROUP]))
        for start in range(0, len(found), MAX_GROUP)
    ]


def compressible(record: MemoryRecord, now: datetime) -> bool:
    """Whether a fact may be compressed with others of its kind: old, rarely used, neither dated nor verified."""
    return (
        now - record.dated >= COMPRESS_AGE
        and record.hits <= RARELY_USED
        and not record.verified
        and record.about is None
        and record.until is None
    )


def compression_groups(records: Sequence[MemoryRecord], vectors: np.ndarray, now: datetime) -> list[CandidateGroup]:
    """Old rarely used facts of one kind, at least `COMPRESS_MIN` of them, `MAX_GROUP` to a question. A kind is
    learned in one place (its facts' visibility) and close in meaning to its first fact."""
    old = [index for index, record in enumerate(records) if compressible(record, now)]
    places: dict[tuple[str | None, bool], list[int]] = {}
    for index in old:
        places.setdefault((records[index].learned_in, records[index].shared), []).append(index)
    groups: list[CandidateGroup] = []
    for members in places.values():
        for kind in _kinds(members, vectors):
            if len(kind) < COMPRESS_MIN:
                continue
            ordered = sorted((records[index] for index in kind), key=lambda record: record.created_at)
            parts = math.ceil(len(ordered) / MAX_GROUP)  # nearly equal parts, each of COMPRESS_MIN or more
            groups += [CandidateGroup("compress", tuple(ordered[i::parts])) for i in range(parts)]
    return groups


def _kinds(members: list[int], vectors: np.ndarray) -> list[list[int]]:
    """`members` in kinds: each joins the first kind whose first fact is within `KIND_SIMILARITY`."""
    kinds: list[list[int]] = []
    leaders = np.zeros((0, vectors.shape[1] if vectors.ndim == 2 else 1), dtype=np.float32)
    for index in members:
        if len(kinds):
            scores = leaders @ vectors[index]
            best = int(np.argmax(scores))
            if scores[best] >= KIND_SIMILARITY:
                kinds[best].append(index)
                continue
        kinds.append([index])
        leaders = np.vstack([leaders, vectors[index][np.newaxis]])
    return kinds


# -- what the model may answer -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """One line of the model's answer: these facts (by their place in the group, from 1) become `text`."""

    numbers: tuple[int, ...]
    text: str | None  # None: kept as they are


def broken_rule(group: CandidateGroup, outcomes: Sequence[Outcome]) -> str | None:
    """Why the model's answer about `group` cannot be applied, or None if it can: it names only the group's
    facts, each once; it merges only in a merge or compression and rewrites one fact alone; it keeps every
    number of what it rewrites and writes in the facts' language; a rewrite of a first-person fact no longer
    speaks as the user; a compression leaves at most `most_kept` facts."""
    seen: set[int] = set()
    for outcome in outcomes:
        if not outcome.numbers:
            return "a line names no fact"
        if any(number < 1 or number > len(group.records) for number in outcome.numbers):
            return f"a line names a fact that is not in the list (1 to {len(group.records)})"
        if seen & set(outcome.numbers) or len(set(outcome.numbers)) != len(outcome.numbers):
            return "a fact is named twice"
        seen.update(outcome.numbers)
        if outcome.text is None:
            continue
        sources = [group.records[number - 1] for number in outcome.numbers]
        if len(sources) > 1 and group.kind == "first_person":
            return "facts of a first-person list are rewritten one by one, never merged"
        if reason := _unfaithful(outcome.text, sources, rewrite=group.kind == "first_person"):
            return reason
    left = len(group.records) - sum(len(outcome.numbers) - 1 for outcome in outcomes if outcome.text is not None)
    if left > group.most_kept:
        return f"{len(group.records)} facts must become at most {group.most_kept}, not {left}"
    return None


def _unfaithful(text: str, sources: Sequence[MemoryRecord], *, rewrite: bool) -> str | None:
    missing = set().union(*(numbers(record.content) for record in sources)) - numbers(text)
    if missing:
        return f"the new text drops {', '.join(sorted(missing))}"
    if is_chinese(text) != is_chinese(sources[0].content):
        return "the new text is not in the language of the fact"
    if rewrite and first_person(text):
        return "the rewritten fact still speaks as the user"
    return None
