"""ThreadIndex: what a past message's place in its conversation adds to finding it.

A message is not a document on its own: it answers the one before it, the one after it often says
what it was about, and it was said by someone. Beside the two legs of the hybrid engine
(`knowledge/search/index.py`: meaning and words, each rescaled to 0..1 over the messages searched),
a search of past messages counts:

- **agreement**: both legs at once (their product). Its weight is negative: a message strong on one
  leg is found whatever the other says, and being strong on both adds less than the two apart.
- **context**: the message's meaning with its neighbours' (their vectors at half weight each, added
  to its own), the meaning of the message after it, and the words of the message before it. This is
  expanding a hit to its neighbours before ranking (MemMachine's "contextualized retrieval").
- **answers follow questions**: a message that asks something is rarely what a later message is
  looking for; what answered it is. A question counts less, and the message after a question gains
  what the question scored.
- **who said it**: a message said by a participant the query names ("what did Alice say about the
  trip?") counts more, unless the query names every participant, or only addresses one at its
  start ("Alice, do you remember ...").
- **how much it says**: "haha yes!" rarely holds what anyone looks for; a message counts more with
  each of its words, up to `FULL_LENGTH`, on a log scale.
- **its sitting**: the messages said together without a pause of `SITTING_GAP` (the pause that ends
  a conversation) share what they are about: a message counts more when the best message of its
  sitting scores high ("the hike after the road trip" is in the sitting that tells of the road trip).

The weights are a listwise fit's (the evidence's share of a softmax over every message searched), rounded,
made on three of LoCoMo's development conversations and kept for gaining on the other two in every category
(docs/performance/locomo.md#a-message-in-its-sitting), as the nine before them were a logistic regression's
(docs/performance/locomo.md#each-message-in-its-conversation). Rows follow the owner's `SearchIndex`: both only
grow, in the same order.

The participants' names also leave the query's meaning (`without_participants`): every message of a
scope is said by one of them, so a name says nothing of what is looked for, while its embedding pulls
toward the messages that greet that person by name; who is named counts through **who said it**.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from datetime import timedelta

import numpy as np

from knowledge.dates.windows import TimeWindow
from knowledge.records import StoredMessage
from knowledge.rules.discretion import Audience
from knowledge.search.lexical import mentions, phrase_pattern

_ASIDES = re.compile(r"\[[^\]]*\]")  # "[photo: ...]", "[shares an image: ...]": not what the message says
_GREETING = r"(?:hey|hi|hello|dear|嘿|喂)?"
FULL_LENGTH = 16  # words (search terms) from which a message counts as saying enough
SITTING_GAP = timedelta(minutes=30)  # a longer pause starts a new sitting, as it ends a conversation


@dataclass(frozen=True, slots=True)
class RecallWeights:
    """How much each signal counts in a past message's relevance (each signal runs 0..1)."""

    meaning: float = 2.5  # cosine similarity of the embeddings, rescaled
    words: float = 2.0  # BM25 over the message with its neighbours' words, rescaled
    agreement: float = -1.1  # meaning x words: strong on both counts less than the two apart (a soft "or")
    context: float = 0.5  # the meaning of the message with its neighbours
    next_meaning: float = 0.45
    previous_words: float = 0.75
    question: float = -0.35  # the message asks something
    answer: float = 0.5  # x what the question before it scored (meaning and words averaged)
    speaker: float = 0.85  # said by a participant the query names
    length: float = 0.85  # how much the message says
    sitting: float = 1.0  # the best score of its sitting (all the above), rescaled

    def share(self, score: np.ndarray) -> np.ndarray:
        """Scores as 0..1 between the least and the most a message can score."""
        weights: tuple[float, ...] = astuple(self)
        least, most = sum(weight for weight in weights if weight < 0), sum(weight for weight in weights if weight > 0)
        return (score - least) / (most - least)


def asks(content: str) -> bool:
    """Whether a message asks something: its words (asides in brackets left out) end with a question mark."""
    return _ASIDES.sub("", content).rstrip().endswith(("?", "？"))


def names_as_subject(query: str, name: str) -> bool:
    """Whether `query` names `name` other than to address them at its start ("Alice, ..."; "Hey Alice! ...")."""
    if not mentions(query, name):
        return False
    addressed = re.match(rf"^\W*{_GREETING}\W*{re.escape(name)}\s*[,，:：!！]", query, re.IGNORECASE)
    return addressed is None or len(re.findall(re.escape(name), query, re.IGNORECASE)) > 1


def without_names(query: str, names: Iterable[str]) -> str:
    """`query` without these names, an English possessive left as "their" ("Alice's trip" -> "their trip"),
    and the spaces they leave closed up."""
    for name in names:
        found = phrase_pattern(name, r"(?P<possessive>['’]s)?")
        query = found.sub(lambda match: " their " if match["possessive"] else " ", query)
    return " ".join(query.split())


def saying(words: float) -> float:
    """How much a message of `words` search terms says, 0..1: log-scaled, full from `FULL_LENGTH` words."""
    return min(1.0, math.log1p(words) / math.log1p(FULL_LENGTH))


class ThreadIndex:
    """Per row: the messages before and after it in its conversation, whether it asks, who said it,
    where (the conversation), when, in which sitting and how much it says."""

    def __init__(self, weights: RecallWeights = RecallWeights()) -> None:
        self.weights = weights
        self._size = 0
        self._previous = np.full(16, -1, dtype=np.int64)
        self._next = np.full(16, -1, dtype=np.int64)
        self._asks = np.zeros(16, dtype=bool)
        self._speaker = np.zeros(16, dtype=np.int32)
        self._place = np.zeros(16, dtype=np.int32)
        self._sent = np.zeros(16, dtype=np.float64)  # seconds since the epoch
        self._sitting = np.zeros(16, dtype=np.int64)  # numbered in order of their first message
        self._saying = np.zeros(16, dtype=np.float32)  # `saying` of its words
        self._context_norm = np.ones(16, dtype=np.float32)  # of the message's vector with its neighbours'
        self._speakers: dict[str, int] = {}
        self._places: dict[str, int] = {}
        self._sittings = 0

    @property
    def size(self) -> int:
        return self._size

    def append(self, message: StoredMessage, previous: int | None, vectors: np.ndarray, words: float) -> int:
        """Add `message` as the next row, after row `previous` of its conversation (None: it opens it);
        `vectors` are the owner's, by row, this message's included; `words`: how many search terms it has.
        Returns its row."""
        row = self._size
        if row == len(self._previous):
            self._grow()
        self._size += 1
        self._previous[row] = -1 if previous is None else previous
        self._next[row] = -1
        if previous is not None:
            self._next[previous] = row
        self._asks[row] = asks(message.content)
        self._speaker[row] = self._speakers.setdefault(message.speaker_name, len(self._speakers))
        self._place[row] = self._places.setdefault(message.conversation_id, len(self._places))
        self._sent[row] = message.sent_at.timestamp()
        if previous is not None and self._sent[row] - self._sent[previous] <= SITTING_GAP.total_seconds():
            self._sitting[row] = self._sitting[previous]
        else:
            self._sitting[row] = self._sittings
            self._sittings += 1
        self._saying[row] = saying(words)
        for changed in (row,) if previous is None else (previous, row):
            self._context_norm[changed] = float(np.linalg.norm(self._context_vector(changed, vectors)))
        return row

    def visible(self, audience: Audience) -> np.ndarray:
        """Which rows `audience` may hear quoted (by the conversation each was said in)."""
        if audience.sees_everything:
            return np.ones(self._size, dtype=bool)
        allowed = [code for place, code in self._places.items() if audience.may_quote_from(place)]
        return np.isin(self._place[: self._size], allowed)

    def said_during(self, window: TimeWindow) -> np.ndarray:
        """Which rows were said in `window`."""
        utc = window.utc()
        sent = self._sent[: self._size]
        return (sent >= utc.start.timestamp()) & (sent < utc.end.timestamp())

    def relevance(self, query_text: str, similarity: np.ndarray, lexical: np.ndarray, kept: np.ndarray) -> np.ndarray:
        """Every row's relevance (0..1 between the least and the most a message can score) from the legs' raw
        scores (by row), each leg rescaled over the `kept` rows; rows not kept get -inf."""
        weights, size = self.weights, self._size
        previous, following = self._previous[:size], self._next[:size]
        meaning, words = _rescaled(similarity, kept), _rescaled(lexical, kept)
        around = 0.5 * _at(similarity, previous) + 0.5 * _at(similarity, following)
        context = (similarity + around) / self._context_norm[:size]
        question = self._asks[:size].astype(np.float32)
        score = (
            weights.meaning * meaning
            + weights.words * words
            + weights.agreement * meaning * words
            + weights.context * _rescaled(context, kept)
            + weights.next_meaning * _at(meaning, following)
            + weights.previous_words * _at(words, previous)
            + weights.question * question
            + weights.answer * _at(question * (meaning + words) / 2, previous)
        )
        if named := self._named(query_text):
            score = score + weights.speaker * np.isin(self._speaker[:size], named)
        score = score + weights.length * self._saying[:size]
        score = score + weights.sitting * self._sitting_best(score, kept)
        return np.where(kept, weights.share(score), -np.inf)

    def without_participants(self, query_text: str) -> str | None:
        """The query without the names of the participants it mentions, for its meaning (see the module's
        docstring); None when it mentions none, or is nothing but names. A one-letter name ("A") is a word of
        most queries rather than a name: it stays."""
        mentioned = [name for name in self._speakers if len(name) > 1 and mentions(query_text, name)]
        rest = without_names(query_text, mentioned) if mentioned else ""
        return rest if any(char.isalnum() for char in rest) else None

    def _sitting_best(self, score: np.ndarray, kept: np.ndarray) -> np.ndarray:
        """Each row's best score among the kept rows of its sitting, rescaled over the kept rows."""
        sitting = self._sitting[: self._size]
        best = np.full(self._sittings, -np.inf)
        np.maximum.at(best, sitting[kept], score[kept])
        return _rescaled(np.where(np.isfinite(best), best, 0.0)[sitting], kept)

    def _named(self, query_text: str) -> list[int]:
        """The participants the query is about (none when it names all of them)."""
        named = [code for name, code in self._speakers.items() if names_as_subject(query_text, name)]
        return [] if len(named) == len(self._speakers) else named

    def _context_vector(self, row: int, vectors: np.ndarray) -> np.ndarray:
        total: np.ndarray = vectors[row].astype(np.float32)
        for neighbour in (self._previous[row], self._next[row]):
            if neighbour >= 0:
                total = total + 0.5 * vectors[neighbour]
        return total

    def _grow(self) -> None:
        size = len(self._previous)
        self._previous = np.concatenate([self._previous, np.full(size, -1, dtype=np.int64)])
        self._next = np.concatenate([self._next, np.full(size, -1, dtype=np.int64)])
        self._asks = np.concatenate([self._asks, np.zeros(size, dtype=bool)])
        self._speaker = np.concatenate([self._speaker, np.zeros(size, dtype=np.int32)])
        self._place = np.concatenate([self._place, np.zeros(size, dtype=np.int32)])
        self._sent = np.concatenate([self._sent, np.zeros(size)])
        self._sitting = np.concatenate([self._sitting, np.zeros(size, dtype=np.int64)])
        self._saying = np.concatenate([self._saying, np.zeros(size, dtype=np.float32)])
        self._context_norm = np.concatenate([self._context_norm, np.ones(size, dtype=np.float32)])


def _rescaled(scores: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """`scores` rescaled so the kept rows run 0..1 (others clipped to it); equal scores count fully, or not
    at all if 0 (as `knowledge.search.index.normalized`)."""
    among = scores[kept]
    if among.size == 0:
        return np.zeros_like(scores)
    low, high = float(among.min()), float(among.max())
    if high > low:
        return np.clip((scores - low) / (high - low), 0.0, 1.0)
    return np.full_like(scores, 1.0 if high > 0 else 0.0)


def _at(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`values` at `rows`, 0 where a row is -1 (no such neighbour)."""
    return np.where(rows >= 0, values[rows], 0.0)
