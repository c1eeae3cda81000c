"""Benchmark of chromadb's writes: CPU per memory written, by how often the vector index is saved.

A memory the monitor writes is an ``upsert`` (a new fact) and an ``update`` (an old one's metadata). chromadb
logs every write made since its vector index was last saved (``hnsw:sync_threshold``) and reads that log
again on each write, so a write costs more the more writes wait. This times, in a real
``PersistentClient`` in a temporary directory, ``--writes`` upserts and updates of single records into a
collection already holding ``--memories`` (384-dimensional vectors, as e5's), for each setting, and
prints the CPU time of the whole process (chromadb's own threads included) per upsert + update.

Run from the repository root::

    python -m bench.chroma_writes                          # 10,000 memories, 600 writes; 1000 (default), 100, 50
    python -m bench.chroma_writes --memories 2000 --every 1000,50,20
"""

from __future__ import annotations

import argparse
import tempfile
import time

import chromadb
import numpy as np
from chromadb.config import Settings

from bench.stats import cpu_model, load_average


def cpu_ms_per_write(memories: int, writes: int, every: int) -> float:
    """CPU milliseconds per upsert + update with the index saved every `every` writes."""
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((memories + writes, 384)).astype(np.float32)
    metadata = {"persona_id": "p", "user_id": "u", "importance": 1.0}
    with tempfile.TemporaryDirectory(prefix="bench-chroma-") as directory:
        client = chromadb.PersistentClient(path=directory, settings=Settings(anonymized_telemetry=False))
        collection = client.create_collection(
            "memories", embedding_function=None, metadata={"hnsw:space": "cosine", "hnsw:sync_threshold": every}
        )
        for start in range(0, memories, 1000):
            end = min(start + 1000, memories)
            collection.add(
                ids=[f"m{i}" for i in range(start, end)],
                embeddings=vectors[start:end],
                documents=[f"memory {i}" for i in range(start, end)],
                metadatas=[metadata] * (end - start),
            )
        started = time.process_time()
        for i in range(writes):
            new = memories + i
            collection.upsert(
                ids=[f"m{new}"], embeddings=vectors[new : new + 1], documents=["new"], metadatas=[metadata]
            )
            collection.update(ids=[f"m{i}"], metadatas=[{**metadata, "importance": 0.9}])
        return (time.process_time() - started) * 1000 / writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000, help="records in the collection first")
    parser.add_argument("--writes", type=int, default=600, help="upserts and updates timed")
    parser.add_argument("--every", default="1000,100,50", help="index saved every N writes, comma-separated")
    args = parser.parse_args()
    print(f"chromadb writes; CPU {cpu_model()}; load average {load_average()}")
    for every in (int(value) for value in args.every.split(",")):
        figure = cpu_ms_per_write(args.memories, args.writes, every)
        print(f"index saved every {every:>5} writes: {figure:6.2f} ms of CPU per upsert + update")


if __name__ == "__main__":
    main()
