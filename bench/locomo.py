"""Retrieval benchmark on LoCoMo, a public dataset of very long two-person conversations with questions.

LoCoMo ("Evaluating Very Long-Term Conversational Memory of LLM Agents", Maharana et al., ACL 2024)
gives, for each conversation, questions and the turns that hold the evidence for the answer. This
script measures whether the companion's conversation history finds those turns, through the code
the companion itself runs:

* each conversation becomes one scope; every turn is stored with ``WorkingMemory.append`` (the first
  speaker as the user, the second as the companion, with the session's date and the speaker's name;
  an image shared in a turn is its caption) and indexed by ``ConversationHistory.index_pending``;
* each question is asked verbatim through ``ConversationHistory.recall``, as a message is in a chat turn:
  it embeds it (no query cache) and runs the hybrid engine; a question naming a time ("in July 2023",
  "last week") keeps to the messages of that window when it holds any (``find_window``, computed in
  UTC, the data's own time, as of a minute after the conversation's last turn).

Reported per category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop; 5 adversarial on its own)
and overall for 1-4: recall@5 and recall@10 of the evidence turns, MRR (first evidence turn within the
top 100), hit@10 (some evidence in the top 10) and all@10 (all of it); per conversation, to see
whether a gain holds on each; with `--held-out`, overall and per category for the conversations named and
for the others apart (a method chosen on the others is checked on conversations it was not chosen on);
query latency p50/p95; ingest throughput. Questions without evidence are
skipped; malformed evidence ids are repaired where unambiguous ("D8:6; D9:17" is two ids, "D:11:26" is
D11:26) and otherwise dropped; the counts are printed.

Run from the repository root (the data is not part of the project; see its licence)::

    python -m bench.locomo                        # ../shared/data/locomo/locomo_dev.json
    python -m bench.locomo --data PATH --json     # one JSON object on stdout
    python -m bench.locomo --scale 10000          # also: query latency in one scope of 10,000 messages
    python -m bench.locomo --held-out conv-42,conv-43   # also: the figures of these and of the others apart
    python -m bench.locomo --database-url postgresql://...   # the same on server mode's PostgreSQL (empty db)

``--scale N`` stores the turns of every conversation over and over (each copy a conversation of its
own) into one scope until it holds N messages, then times every question against it. A copy's
passages are the same texts, so their embeddings are remembered rather than computed again.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.stats import summarize
from knowledge.conversations.history import ConversationHistory
from knowledge.conversations.message_log import MessageLog
from knowledge.conversations.working_memory import WorkingMemory
from knowledge.dates.windows import find_window
from knowledge.records import Scope
from knowledge.search.embedding import Embedder, load_embedder
from knowledge.search.index import QueryEncoder
from knowledge.sql.database import Database

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = "../shared/data/locomo/locomo_dev.json"  # relative to the repository root
PERSONA = "locomo"
HEADLINE = (1, 2, 3, 4)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
METRICS = ("recall@5", "recall@10", "mrr", "hit@10", "all@10")
DEPTH = 100  # hits asked for per question; MRR counts the first evidence turn within them


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    sent_at: datetime


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass(frozen=True, slots=True)
class Sample:
    sample_id: str
    user: str  # speaker_a, stored as the user
    companion: str  # speaker_b, stored as the companion's replies
    turns: list[Turn]
    questions: list[Question]


# --- data -----------------------------------------------------------------------------------------


def session_time(text: str) -> datetime:
    """A LoCoMo session date ("1:56 pm on 8 May, 2023") as an aware datetime (UTC)."""
    return datetime.strptime(text.replace(" on ", " "), "%I:%M %p %d %B, %Y").replace(tzinfo=UTC)


def evidence_ids(raw: Iterable[str], known: set[str], quirks: Counter[str]) -> frozenset[str]:
    """The valid turn ids of a question's evidence, repairing what is unambiguous and counting the rest."""
    found: set[str] = set()
    for entry in raw:
        parts = [part for part in re.split(r"[;,\s]+", entry) if part]
        for part in parts:
            repaired = re.sub(r"^D:(\d+):(\d+)$", r"D\1:\2", part)
            if repaired in known:
                found.add(repaired)
                if repaired != entry:
                    quirks["evidence ids repaired"] += 1
            else:
                quirks["evidence ids dropped"] += 1
    return frozenset(found)


def load_samples(path: Path) -> tuple[list[Sample], Counter[str]]:
    """The conversations and questions of a LoCoMo file, and counts of the data quirks met."""
    quirks: Counter[str] = Counter()
    samples = []
    for raw in json.loads(path.read_text(encoding="utf-8")):
        conversation = raw["conversation"]
        sessions = sorted(
            int(key.split("_")[1]) for key in conversation if re.fullmatch(r"session_\d+", key) and conversation[key]
        )
        turns = []
        for number in sessions:
            start = session_time(conversation[f"session_{number}_date_time"])
            for offset, turn in enumerate(conversation[f"session_{number}"]):
                text = turn["text"]
                if turn.get("blip_caption"):
                    text += f" [shares an image: {turn['blip_caption']}]"
                turns.append(Turn(turn["dia_id"], turn["speaker"], text, start + timedelta(seconds=offset)))
        known = {turn.dia_id for turn in turns}
        questions = []
        for qa in raw["qa"]:
            evidence = evidence_ids(qa.get("evidence", []), known, quirks)
            if evidence:
                questions.append(Question(qa["question"], int(qa["category"]), evidence))
            else:
                quirks["questions without evidence skipped"] += 1
        samples.append(Sample(raw["sample_id"], conversation["speaker_a"], conversation["speaker_b"], turns, questions))
    return samples, quirks


# --- metrics --------------------------------------------------------------------------------------


def question_metrics(ranked: Sequence[str], evidence: frozenset[str]) -> dict[str, float]:
    """The metrics of one question from the ids found, best first."""
    top5, top10 = set(ranked[:5]), set(ranked[:10])
    first = next((rank for rank, found in enumerate(ranked, start=1) if found in evidence), None)
    return {
        "recall@5": len(evidence & top5) / len(evidence),
        "recall@10": len(evidence & top10) / len(evidence),
        "mrr": 1.0 / first if first else 0.0,
        "hit@10": float(bool(evidence & top10)),
        "all@10": float(evidence <= top10),
    }


def averaged(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    """The mean of each metric over questions, with how many there were."""
    summary = {name: round(float(np.mean([row[name] for row in rows])), 4) if rows else 0.0 for name in METRICS}
    return {**summary, "questions": len(rows)}


def report_of(
    results: Sequence[tuple[str, int, dict[str, float]]], held_out: Collection[str] = ()
) -> dict[str, object]:
    """Averages overall (categories 1-4), per category and per conversation (1-4), from (sample, category, metrics);
    given `held_out` conversations, overall and per category for them and for the others apart ("halves")."""
    by_sample: dict[str, list[dict[str, float]]] = defaultdict(list)
    for sample_id, category, metrics in results:
        if category in HEADLINE:
            by_sample[sample_id].append(metrics)
    report: dict[str, object] = {
        **by_category(results),
        "conversations": {sample_id: averaged(rows) for sample_id, rows in by_sample.items()},
    }
    if held_out:
        report["halves"] = {
            "chosen on": by_category([row for row in results if row[0] not in held_out]),
            "held out": by_category([row for row in results if row[0] in held_out]),
        }
    return report


def by_category(results: Sequence[tuple[str, int, dict[str, float]]]) -> dict[str, object]:
    """Averages overall (categories 1-4) and per category."""
    categories: dict[int, list[dict[str, float]]] = defaultdict(list)
    for _, category, metrics in results:
        categories[category].append(metrics)
    headline = [metrics for _, category, metrics in results if category in HEADLINE]
    return {
        "overall": averaged(headline),
        "categories": {f"{key} {CATEGORIES[key]}": averaged(categories[key]) for key in sorted(categories)},
    }


# --- running --------------------------------------------------------------------------------------


def ingest(
    sample: Sample, working_memory: WorkingMemory, history: ConversationHistory, *, scope: Scope | None = None
) -> Scope:
    """Store and index every turn of `sample` as one conversation, in a scope of its own unless one is given."""
    scope = scope or Scope(PERSONA, f"locomo:{sample.sample_id}")
    for turn in sample.turns:
        working_memory.append(
            PERSONA,
            f"locomo:{sample.sample_id}",
            role="user" if turn.speaker == sample.user else "assistant",
            user_id=scope.user_id,
            speaker_name=turn.speaker,
            content=turn.text,
            sent_at=turn.sent_at,
        )
    history.index_pending()
    return scope


def timed_search(
    history: ConversationHistory, scope: Scope, question: str, asked_at: datetime, latencies: list[float]
) -> list[str]:
    """The message ids found for `question` asked at `asked_at`, best first; its wall time is appended to
    `latencies` (the time window's parsing included)."""
    started = time.perf_counter()
    hits = history.recall(scope, question, window=find_window(question, asked_at), limit=DEPTH)
    latencies.append((time.perf_counter() - started) * 1000)
    return [hit.message.id for hit in hits]


def asked_after(sample: Sample) -> datetime:
    """When the questions are asked: a minute after the conversation's last turn."""
    return max(turn.sent_at for turn in sample.turns) + timedelta(minutes=1)


class PassageMemo:
    """The embedder, remembering passage vectors by text (queries are always embedded)."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.name, self.dim = inner.name, inner.dim
        self._known: dict[str, np.ndarray] = {}

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._inner.embed_queries(texts)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        new = [text for text in dict.fromkeys(texts) if text not in self._known]
        if new:
            self._known.update(zip(new, self._inner.embed_passages(new)))
        return np.stack([self._known[text] for text in texts])


def open_history(where: Database | Path, embedder: Embedder) -> tuple[WorkingMemory, ConversationHistory]:
    """Working memory and the conversation history on a database (or an embedded SQLite file), as the app has."""
    working_memory = WorkingMemory(MessageLog(where))
    history = ConversationHistory(working_memory.log, embedder, where, queries=QueryEncoder(embedder, cache_size=0))
    return working_memory, history


def ask(
    sample: Sample, history: ConversationHistory, latencies: list[float]
) -> list[tuple[str, int, dict[str, float]]]:
    """Every question of an ingested `sample`, asked through the history search; the metrics of each."""
    scope = Scope(PERSONA, f"locomo:{sample.sample_id}")
    dia_ids = {message.id: turn.dia_id for message, turn in zip(history.messages(scope), sample.turns, strict=True)}
    history.search(scope, "warm-up")  # loads the scope's snapshot, as its first turn of a day would
    asked_at = asked_after(sample)
    return [
        (
            sample.sample_id,
            question.category,
            question_metrics(
                [dia_ids[found] for found in timed_search(history, scope, question.text, asked_at, latencies)],
                question.evidence,
            ),
        )
        for question in sample.questions
    ]


def run(
    samples: Sequence[Sample], *, scale: int = 0, database_url: str | None = None, held_out: Collection[str] = ()
) -> dict[str, object]:
    """Ingest every conversation and ask every question; the report with timings. `database_url`: an empty
    PostgreSQL database to run on (server mode) instead of an embedded SQLite file; `held_out`: conversations
    reported apart too (`report_of`)."""
    embedder = PassageMemo(load_embedder("auto"))
    results: list[tuple[str, int, dict[str, float]]] = []
    latencies: list[float] = []
    ingest_seconds = 0.0
    with tempfile.TemporaryDirectory() as data_dir:
        where: Database | Path = Path(data_dir) / "companion.sqlite3"
        if database_url:
            from knowledge.sql.postgres import PostgresDatabase

            where = PostgresDatabase(database_url)
        working_memory, history = open_history(where, embedder)
        try:
            for sample in samples:
                started = time.perf_counter()
                ingest(sample, working_memory, history)
                ingest_seconds += time.perf_counter() - started
                results += ask(sample, history, latencies)
                print(
                    f"  {sample.sample_id}: {len(sample.turns)} turns, {len(sample.questions)} questions",
                    file=sys.stderr,
                )
            scaled = scaled_latency(samples, scale, working_memory, history) if scale else {}
        finally:
            history.close()
            working_memory.close()
    turns = sum(len(sample.turns) for sample in samples)
    return {
        **report_of(results, held_out),
        "latency_ms": summarize(latencies),
        **scaled,
        "ingest_turns_per_second": round(turns / ingest_seconds, 1),
        "embedder": embedder.name,
        "turns": turns,
        "backend": "postgresql" if database_url else "sqlite",
    }


def scaled_latency(
    samples: Sequence[Sample], size: int, working_memory: WorkingMemory, history: ConversationHistory
) -> dict[str, object]:
    """Query latency in one scope holding `size` messages: every conversation stored again and again."""
    copies: list[Sample] = []
    stored = 0
    while stored < size:
        for sample in samples:
            turns = sample.turns[: size - stored]
            copies.append(replace(sample, sample_id=f"scaled-{len(copies)}", turns=turns))
            stored += len(turns)
    scope = Scope(PERSONA, "locomo:scaled")
    for copy in copies:
        ingest(copy, working_memory, history, scope=scope)
        print(f"  scaled scope: {len(history.messages(scope)):,} messages", file=sys.stderr, end="\r")
    print(file=sys.stderr)
    history.search(scope, "warm-up")
    latencies: list[float] = []
    for sample in samples:
        for question in sample.questions:
            timed_search(history, scope, question.text, asked_after(sample), latencies)
    return {"scaled_latency_ms": {**summarize(latencies), "messages": len(history.messages(scope))}}


def print_table(report: dict[str, object], quirks: Counter[str]) -> None:
    """The report as a table for people."""
    header = f"{'':<24}" + "".join(f"{name:>11}" for name in (*METRICS, "questions"))
    print(header)
    rows: list[tuple[str, dict[str, float]]] = [("overall (1-4)", report["overall"])]  # type: ignore[list-item]
    rows += list(report["categories"].items())  # type: ignore[attr-defined]
    rows += [(f"  {name}", values) for name, values in report["conversations"].items()]  # type: ignore[attr-defined]
    for label, values in rows:
        print(f"{label:<24}" + "".join(f"{values[name]:>11.3f}" for name in METRICS) + f"{values['questions']:>11}")
    if halves := report.get("halves"):
        print_halves(halves)  # type: ignore[arg-type]
    latency = report["latency_ms"]
    print(f"\nquery latency: p50 {latency['p50']} ms, p95 {latency['p95']} ms, embedding included")  # type: ignore
    if scaled := report.get("scaled_latency_ms"):
        print(
            f"query latency in one scope of {scaled['messages']:,} messages: "  # type: ignore[index]
            f"p50 {scaled['p50']} ms, p95 {scaled['p95']} ms"  # type: ignore[index]
        )
    print(f"ingest: {report['ingest_turns_per_second']} turns/s ({report['turns']} turns, {report['embedder']})")
    print("data: " + ", ".join(f"{count} {what}" for what, count in sorted(quirks.items())))


def print_halves(halves: dict[str, dict[str, Any]]) -> None:
    """Recall@10 and MRR, overall and per category, of the conversations held out and of the others (a category
    one half has no question of shows as -)."""
    names = sorted({name for values in halves.values() for name in values["categories"]})
    for metric in ("recall@10", "mrr"):
        print(f"\n{metric:<24}" + "".join(f"{name:>15}" for name in ["overall (1-4)", *names]))
        for half, values in halves.items():
            cells = [values["overall"], *(values["categories"].get(name) for name in names)]
            print(f"{half:<24}" + "".join(f"{cell[metric]:>15.3f}" if cell else f"{'-':>15}" for cell in cells))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help=f"LoCoMo JSON file (default: {DEFAULT_DATA}, from the repo root)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--scale", type=int, default=0, metavar="N", help="also time queries in a scope of N messages")
    parser.add_argument("--database-url", help="run on this (empty) PostgreSQL database, as server mode does")
    parser.add_argument(
        "--held-out", default="", metavar="IDS", help="comma-separated conversation ids to report apart from the others"
    )
    args = parser.parse_args(argv)
    path = args.data or REPO_ROOT / DEFAULT_DATA
    if not path.is_file():
        parser.error(f"no LoCoMo file at {path}; pass --data PATH")
    samples, quirks = load_samples(path)
    held_out = {sample_id for sample_id in args.held_out.split(",") if sample_id}
    if unknown := held_out - {sample.sample_id for sample in samples}:
        parser.error(f"no conversation {', '.join(sorted(unknown))} in {path}")
    report = run(samples, scale=args.scale, database_url=args.database_url, held_out=held_out)
    if args.json:
        print(json.dumps({**report, "data_quirks": dict(quirks)}, ensure_ascii=False))
    else:
        print_table(report, quirks)


if __name__ == "__main__":
    main()
