"""Benchmark of chromadb writes made by several threads at once: one call each, or gathered.

An embedded chromadb write holds the GIL for its whole call, its SQLite commits and their fsyncs included, so
while it runs no other Python thread does: not the event loop answering users either. This writes, in a real
``PersistentClient`` in a temporary directory holding ``--memories`` records, ``--writers`` threads at once
(background jobs of different users), each ``--writes`` memories one after another, each an upsert (a new
fact) then an update (another's metadata), first each write its own call, then through
``knowledge.memory.chroma_gathering.GatheredWrites``. Beside them a heartbeat thread, standing for the event
loop, asks to run every millisecond. Printed for each way:

* the chromadb calls made, and the wall time and CPU of the process per memory written;
* how late the heartbeat ran (p50 / p99 / max), and the share of the time it was held back more than 2 ms:
  the time the event loop could not have answered anyone.

Run from the repository root::

    python -m bench.gathered_writes                          # 8 writers x 40 memories into 10,000
    python -m bench.gathered_writes --writers 16 --memories 2000
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import chromadb
import numpy as np
from chromadb.config import Settings

from bench.stats import cpu_model, load_average
from knowledge.memory.chroma_gathering import GatheredWrites

DIM = 384  # e5's
HELD_BACK = 0.002  # seconds: a heartbeat this late was held back, not merely scheduled


class Calls:
    """The collection's write calls, counted."""

    def __init__(self, collection: Any) -> None:
        self.collection = collection
        self.made = 0

    def __getattr__(self, method: str) -> Any:
        def counted(**arguments: Any) -> Any:
            self.made += 1
            return getattr(self.collection, method)(**arguments)

        return counted


def filled(directory: str, memories: int, rng: np.random.Generator) -> Any:
    client = chromadb.PersistentClient(path=directory, settings=Settings(anonymized_telemetry=False))
    collection = client.create_collection("memories", embedding_function=None, metadata={"hnsw:space": "cosine"})
    for start in range(0, memories, 1000):
        end = min(start + 1000, memories)
        collection.add(
            ids=[f"m{i}" for i in range(start, end)],
            embeddings=rng.standard_normal((end - start, DIM)).astype(np.float32),
            metadatas=[{"writer": -1}] * (end - start),
        )
    return collection


def heartbeat(stop: threading.Event, lateness: list[float]) -> None:
    while not stop.is_set():
        asked = time.perf_counter()
        time.sleep(0.001)
        lateness.append(time.perf_counter() - asked - 0.001)


def run(args: argparse.Namespace, gathered: bool) -> dict[str, float]:
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory(prefix="bench-gathered-") as directory:
        calls = Calls(filled(directory, args.memories, rng))
        writes = GatheredWrites(calls) if gathered else None
        vectors = rng.standard_normal((args.writers * args.writes, DIM)).astype(np.float32)

        def write(method: str, **arguments: Any) -> None:
            if writes is None:
                getattr(calls, method)(**arguments)
            else:
                writes.write(method, **arguments)

        def writer(number: int) -> None:
            for turn in range(args.writes):
                row = number * args.writes + turn
                write("upsert", ids=[f"new{row}"], embeddings=vectors[row : row + 1], metadatas=[{"writer": number}])
                write("update", ids=[f"m{row % args.memories}"], metadatas=[{"writer": number, "turn": turn}])

        stop, lateness = threading.Event(), []
        beat = threading.Thread(target=heartbeat, args=(stop, lateness))
        beat.start()
        wall, cpu = time.perf_counter(), time.process_time()
        with ThreadPoolExecutor(args.writers) as pool:
            list(pool.map(writer, range(args.writers)))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        stop.set()
        beat.join()
    late = np.array(lateness)
    written = args.writers * args.writes
    return {
        "calls": calls.made,
        "wall ms": wall * 1000 / written,
        "cpu ms": cpu * 1000 / written,
        "late p50": float(np.percentile(late, 50)) * 1000,
        "late p99": float(np.percentile(late, 99)) * 1000,
        "late max": float(late.max()) * 1000,
        "held back": float(late[late > HELD_BACK].sum()) / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000, help="records in the collection first")
    parser.add_argument("--writers", type=int, default=8, help="threads writing at once")
    parser.add_argument("--writes", type=int, default=40, help="memories each writer writes, one after another")
    args = parser.parse_args()
    print(
        f"chromadb writes, {args.writers} writers x {args.writes} memories (an upsert and an update each) into "
        f"{args.memories:,}; CPU {cpu_model()}"
    )
    for gathered in (False, True):
        figures = run(args, gathered)
        print(
            f"{'gathered' if gathered else 'one call each':<14} {figures['calls']:5d} calls, per memory "
            f"{figures['wall ms']:6.2f} ms wall, {figures['cpu ms']:6.2f} ms CPU; heartbeat late p50 "
            f"{figures['late p50']:5.2f} / p99 {figures['late p99']:6.2f} / max {figures['late max']:6.1f} ms, "
            f"held back {figures['held back']:.0%} of the time   (load average {load_average()})"
        )


if __name__ == "__main__":
    main()
