"""Lexical search: words for English and Chinese, and a BM25 index that changes one document at a time.

English words are lower-cased, stopwords dropped and Snowball-stemmed ("running" and "runs" meet at
"run"). Chinese (and Japanese, Korean) has no spaces, so every run of those characters becomes its
single characters and its overlapping character pairs: "喜欢拉面" gives 喜 欢 拉 面 喜欢 欢拉 拉面.
Pairs carry most words, single characters catch one-character words (猫); BM25's inverse document
frequency keeps the very common ones (我, 的) from counting much. This is the scheme of Lucene's CJK
analyzer: unlike a dictionary segmenter it never splits a query and a memory differently.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterable, Mapping

import numpy as np
import Stemmer

Terms = Mapping[str, float]  # a document's terms and their (possibly fractional) frequencies

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"  # kana, Han, Hangul
_TOKEN = re.compile(rf"([{_CJK}]+)|[^\W_{_CJK}]+")
# A long query costs time in proportion to its terms; the rarest ones carry the match anyway.
MAX_QUERY_TERMS = 32

ENGLISH_STOPWORDS = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just let me more most my myself
    no nor not of off on once only or other ought our ours ourselves out over own same she should so some such
    than that the their theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your yours yourself
    yourselves d ll m re s t ve don didn doesn isn wasn aren weren haven hasn hadn won wouldn shouldn couldn
    can't cannot
    """.split()
)

_stemmers = threading.local()  # a Stemmer keeps state between calls: one per thread


def _stem(words: list[str]) -> list[str]:
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        stemmer = _stemmers.english = Stemmer.Stemmer("english")
    stems: list[str] = stemmer.stemWords(words)
    return stems


def mentions(content: str, phrase: str) -> bool:
    """Whether `content` contains `phrase` literally, case-insensitive; whole words only at Latin-script edges."""
    return bool(phrase) and phrase_pattern(phrase).search(content) is not None


def phrase_pattern(phrase: str, suffix: str = "") -> re.Pattern[str]:
    """`phrase` literally, case-insensitive, then the regular expression `suffix`; whole words only at Latin-script
    edges (as `mentions` finds it). `phrase` must not be empty."""
    start = r"(?<![A-Za-z0-9])" if phrase[0].isascii() and phrase[0].isalnum() else ""
    end = r"(?![A-Za-z0-9])" if phrase[-1].isascii() and phrase[-1].isalnum() else ""
    return re.compile(start + re.escape(phrase) + suffix + end, re.IGNORECASE)


def tokenize(text: str) -> list[str]:
    """The search terms of `text`: stemmed English words without stopwords, CJK characters and pairs."""
    words: list[str] = []
    cjk: list[str] = []
    for match in _TOKEN.finditer(text.lower()):
        token = match.group()
        if match.group(1):
            cjk.extend(token)
            cjk.extend(token[index : index + 2] for index in range(len(token) - 1))
        elif token not in ENGLISH_STOPWORDS:
            words.append(token)
    return _stem(words) + cjk


def terms_of(text: str, weight: float = 1.0) -> dict[str, float]:
    """The terms of `text` with their frequencies, each occurrence counting `weight`."""
    terms: dict[str, float] = {}
    for token in tokenize(text):
        terms[token] = terms.get(token, 0.0) + weight
    return terms


def combined(*parts: tuple[Terms, float]) -> dict[str, float]:
    """Several term sets, each scaled by its weight, as one document (a text with its context)."""
    total: dict[str, float] = {}
    for terms, scale in parts:
        for term, weight in terms.items():
            total[term] = total.get(term, 0.0) + weight * scale
    return total


class LexicalIndex:
    """BM25 (k1, b as in Lucene) over documents numbered 0..size-1, kept in step with a row-based store.

    Rows follow the owner's layout: `append` adds the next row, `replace` changes one, and
    `swap_remove` moves the last row into a removed row's place. Posting lists are Python dicts
    for cheap single-document changes, turned into arrays once per term and reused until the
    term's postings change.
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self._docs: list[dict[str, float]] = []
        self._postings: dict[str, dict[int, float]] = {}
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._lengths = np.zeros(16, dtype=np.float32)
        self._total_length = 0.0

    @property
    def size(self) -> int:
        return len(self._docs)

    def append(self, terms: Terms) -> None:
        """Add a document as the next row."""
        if len(self._docs) == len(self._lengths):
            self._lengths = np.concatenate([self._lengths, np.zeros_like(self._lengths)])
        self._docs.append({})
        self._set(len(self._docs) - 1, terms)

    def replace(self, row: int, terms: Terms) -> None:
        """Change the document at `row`."""
        self._unset(row)
        self._set(row, terms)

    def swap_remove(self, row: int) -> None:
        """Remove the document at `row`; the last document takes its place."""
        last = len(self._docs) - 1
        self._unset(row)
        if row != last:
            moved = self._docs[last]
            self._unset(last)
            self._set(row, moved)
        self._docs.pop()

    def scores(self, query_terms: Iterable[str]) -> np.ndarray:
        """The BM25 score of every row for these query terms (0 where no term matches)."""
        count = len(self._docs)
        scores = np.zeros(count, dtype=np.float32)
        terms = [term for term in dict.fromkeys(query_terms) if term in self._postings]
        if not terms or count == 0:
            return scores
        terms = sorted(terms, key=lambda term: len(self._postings[term]))[:MAX_QUERY_TERMS]
        lengths = self._lengths[:count]
        average = max(self._total_length / count, 1e-9)
        norms = self.k1 * (1.0 - self.b + self.b * lengths / average)
        for term in terms:
            rows, frequencies = self._array(term)
            idf = math.log(1.0 + (count - len(rows) + 0.5) / (len(rows) + 0.5))
            scores[rows] += idf * frequencies * (self.k1 + 1.0) / (frequencies + norms[rows])
        return scores

    def _array(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        arrays = self._arrays.get(term)
        if arrays is None:
            posting = self._postings[term]
            arrays = self._arrays[term] = (
                np.fromiter(posting.keys(), dtype=np.int64, count=len(posting)),
                np.fromiter(posting.values(), dtype=np.float32, count=len(posting)),
            )
        return arrays

    def _set(self, row: int, terms: Terms) -> None:
        doc = {term: float(weight) for term, weight in terms.items() if weight > 0}
        self._docs[row] = doc
        length = sum(doc.values())
        self._lengths[row] = length
        self._total_length += length
        for term, weight in doc.items():
            self._postings.setdefault(term, {})[row] = weight
            self._arrays.pop(term, None)

    def _unset(self, row: int) -> None:
        doc = self._docs[row]
        self._total_length -= float(self._lengths[row])
        self._lengths[row] = 0.0
        for term in doc:
            posting = self._postings[term]
            del posting[row]
            if not posting:
                del self._postings[term]
            self._arrays.pop(term, None)
        self._docs[row] = {}
