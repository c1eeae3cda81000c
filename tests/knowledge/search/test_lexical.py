"""The tokenizer (English stems, Chinese characters and pairs) and the incremental BM25 index."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge.search.lexical import LexicalIndex, combined, terms_of, tokenize


def test_english_words_are_stemmed_and_stopwords_dropped() -> None:
    assert tokenize("The cats were RUNNING to their runs!") == ["cat", "run", "run"]
    assert tokenize("Caroline's support group") == ["carolin", "support", "group"]


def test_chinese_becomes_characters_and_overlapping_pairs() -> None:
    assert tokenize("喜欢拉面") == ["喜", "欢", "拉", "面", "喜欢", "欢拉", "拉面"]
    assert tokenize("猫") == ["猫"]


def test_mixed_text_keeps_both_scripts() -> None:
    tokens = tokenize("主人的 manager Tom 很严格, meetings on 周三")
    assert {"manag", "tom", "meet", "严格", "周三", "主人"} <= set(tokens)
    assert "on" not in tokens


def test_terms_carry_weights_and_combine() -> None:
    assert terms_of("cat cat dog", 0.5) == {"cat": 1.0, "dog": 0.5}
    assert combined((terms_of("cat cat"), 1.0), (terms_of("cat dog"), 0.5)) == {"cat": 2.5, "dog": 0.5}


def bm25(docs: list[dict[str, float]], query: list[str], k1: float = 1.2, b: float = 0.75) -> np.ndarray:
    """Textbook BM25, computed from scratch."""
    count = len(docs)
    average = sum(sum(doc.values()) for doc in docs) / count
    scores = np.zeros(count)
    for term in set(query):
        df = sum(1 for doc in docs if term in doc)
        if not df:
            continue
        idf = np.log(1 + (count - df + 0.5) / (df + 0.5))
        for row, doc in enumerate(docs):
            tf = doc.get(term, 0.0)
            length = sum(doc.values())
            scores[row] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))
    return scores


DOCS = ["a cat sat on the mat", "the dog chased the cat", "dogs and cats", "主人喜欢拉面", "拉面很好吃", "birds sing"]


def test_scores_are_bm25_and_follow_every_change() -> None:
    docs = [dict(terms_of(text)) for text in DOCS]
    index = LexicalIndex()
    for doc in docs:
        index.append(doc)
    query = tokenize("cat dog 拉面")
    assert index.scores(query) == pytest.approx(bm25(docs, query), rel=1e-5)

    index.swap_remove(1)  # the last document moves into row 1
    docs[1] = docs.pop()
    index.replace(0, terms_of("a cat and a dog"))
    docs[0] = dict(terms_of("a cat and a dog"))
    index.swap_remove(len(docs) - 1)
    docs.pop()
    assert index.size == len(docs) == 4
    assert index.scores(query) == pytest.approx(bm25(docs, query), rel=1e-5)


def test_rarer_words_count_more_and_unknown_words_nothing() -> None:
    index = LexicalIndex()
    for text in ["cat food", "cat toy", "cat bed", "parrot food"]:
        index.append(terms_of(text))
    scores = index.scores(tokenize("parrot cat"))
    assert int(np.argmax(scores)) == 3
    assert not index.scores(tokenize("zebra")).any()
