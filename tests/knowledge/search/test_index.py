"""Score fusion and the hybrid index: each leg normalised, both counting, groups filtered inside the search."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge.search.embedding import Embedder
from knowledge.search.index import FusionWeights, Query, QueryEncoder, SearchIndex, fuse, normalized
from knowledge.search.lexical import terms_of, tokenize


def test_each_leg_is_rescaled_to_its_own_range() -> None:
    assert normalized(np.array([0.8, 0.9, 0.85])) == pytest.approx([0.0, 1.0, 0.5])
    assert normalized(np.array([0.7, 0.7])) == pytest.approx([1.0, 1.0])  # equally close: all count
    assert normalized(np.zeros(3)) == pytest.approx([0.0, 0.0, 0.0])  # no word in common: none count


def test_fusion_prefers_what_both_legs_support() -> None:
    similarity = np.array([0.90, 0.88, 0.70])  # dense scores crowd together
    lexical = np.array([0.0, 4.0, 6.0])  # BM25 scores spread out
    fused = fuse(similarity, lexical)
    assert fused.argmax() == 1  # good on both beats best on one
    assert fused[0] == pytest.approx(fused[2]) == 0.5  # best on one leg only: equal weights, equal standing
    assert fuse(similarity, lexical, FusionWeights(dense=1.0, lexical=0.0)).argmax() == 0


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_an_exact_word_lifts_an_item_the_embedding_ranks_second() -> None:
    index = SearchIndex(dim=2)
    index.put("a", vector=unit(1.0, 0.10), terms=terms_of("Alice has a cat called Mochi"))
    index.put("b", vector=unit(1.0, 0.30), terms=terms_of("Alice adopted a rescue greyhound named Luna"))
    index.put("c", vector=unit(0.0, 1.0), terms=terms_of("Alice works night shifts"))
    query = Query("Luna", unit(1.0, 0.0), tuple(tokenize("Luna")))
    assert [match.key for match in index.search(query, limit=2)] == ["b", "a"]
    assert [match.key for match in index.search(Query("?", unit(1.0, 0.0), ()), limit=2)] == ["a", "b"]


def test_groups_are_filtered_inside_the_search() -> None:
    index = SearchIndex(dim=2)
    index.put("fact", vector=unit(1.0, 0.0), terms=terms_of("ramen"), group=0)
    index.put("episode", vector=unit(0.0, 1.0), terms=terms_of("talked about ramen"), group=1)
    query = Query("ramen", unit(1.0, 0.0), ("ramen",))
    assert [match.key for match in index.search(query, limit=5, groups=[1])] == ["episode"]
    index.remove(["episode", "missing"])
    assert index.search(query, limit=5, groups=[1]) == [] and index.size == 1
    with pytest.raises(ValueError, match="vector and its terms"):
        index.put("new", terms=terms_of("x"))


def test_the_encoder_embeds_a_repeated_query_once(embedder: Embedder) -> None:
    calls: list[int] = []

    class Counting:
        name, dim = embedder.name, embedder.dim

        def embed_queries(self, texts):  # type: ignore[no-untyped-def]
            calls.append(len(texts))
            return embedder.embed_queries(texts)

        def embed_passages(self, texts):  # type: ignore[no-untyped-def]
            return embedder.embed_passages(texts)

    encoder = QueryEncoder(Counting(), cache_size=1)
    first = encoder.encode("主人喜欢什么?")
    assert encoder.encode("主人喜欢什么?") is first and calls == [1]
    encoder.encode("something else")
    encoder.encode("主人喜欢什么?")  # pushed out of a one-entry cache
    assert calls == [1, 1, 1]
    assert first.terms == tuple(tokenize("主人喜欢什么?"))


def test_the_encoder_keeps_a_text_five_minutes_at_most_and_drops_all_on_forget(embedder: Embedder) -> None:
    seconds = [0.0]
    encoder = QueryEncoder(embedder, monotonic=lambda: seconds[0])
    first = encoder.encode("my locker code is 4711")
    seconds[0] = 200.0
    assert encoder.encode("my locker code is 4711") is first
    encoder.encode("something else")
    seconds[0] = 301.0
    assert encoder.texts() == ["something else"]
    assert encoder.encode("my locker code is 4711") is not first  # embedded again
    encoder.forget()
    assert encoder.texts() == []


def test_similarity_search_runs_blas_on_one_thread() -> None:
    # Two BLAS threads made a 10k-item search ~10x slower whenever the other core was busy.
    from threadpoolctl import threadpool_info

    import knowledge.search.index  # noqa: F401  (importing the engine sets the limit)

    blas = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert blas and all(pool["num_threads"] == 1 for pool in blas)
