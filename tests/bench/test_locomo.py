"""The LoCoMo benchmark's data handling and metrics, on a toy conversation (the real data is not shipped)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.locomo import evidence_ids, load_samples, question_metrics, report_of, run, session_time

TOY = [
    {
        "sample_id": "toy-1",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a greyhound called Luna last week"},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! I started learning the cello"},
            ],
            "session_2_date_time": "9:00 am on 1 June, 2023",
            "session_2": [
                {
                    "speaker": "Ann",
                    "dia_id": "D2:1",
                    "text": "Luna ran on the beach today",
                    "blip_caption": "a dog running on sand",
                },
                {"speaker": "Ben", "dia_id": "D2:2", "text": "My cello teacher is strict"},
            ],
            "session_3_date_time": "10:00 am on 2 June, 2023",  # a date without turns
            "session_3": [],
        },
        "qa": [
            {"question": "Which pet did Ann adopt last week?", "answer": "Luna", "evidence": ["D1:1"], "category": 4},
            {
                "question": "Which instrument does Ben play?",
                "answer": "cello",
                "evidence": ["D1:2; D2:2"],
                "category": 1,
            },
            {"question": "Where did the dog run?", "answer": "beach", "evidence": ["D:2:1", "D9:9"], "category": 2},
            {"question": "Is Ben a pilot?", "adversarial_answer": "no", "evidence": [], "category": 5},
        ],
    }
]


def test_metrics_of_one_question() -> None:
    evidence = frozenset({"D1:1", "D1:7"})
    ranked = ["D1:3", "D1:7", *[f"D2:{i}" for i in range(10)], "D1:1"]
    assert question_metrics(ranked, evidence) == {
        "recall@5": 0.5,
        "recall@10": 0.5,
        "mrr": 0.5,
        "hit@10": 1.0,
        "all@10": 0.0,
    }
    assert question_metrics(["D1:1", "D1:7"], evidence)["all@10"] == 1.0
    assert question_metrics(["D3:1"], evidence)["mrr"] == 0.0


def test_the_report_averages_questions_and_keeps_adversarial_apart() -> None:
    def row(recall: float) -> dict[str, float]:
        return {"recall@5": recall, "recall@10": recall, "mrr": recall, "hit@10": recall, "all@10": recall}

    report = report_of([("a", 1, row(1.0)), ("a", 4, row(0.0)), ("b", 4, row(0.5)), ("b", 5, row(1.0))])
    assert report["overall"] == {**row(0.5), "questions": 3}
    assert report["categories"]["4 single-hop"]["recall@10"] == 0.25  # type: ignore[index]
    assert report["categories"]["5 adversarial"]["questions"] == 1  # type: ignore[index]
    assert report["conversations"]["b"]["questions"] == 1  # type: ignore[index]
    assert "halves" not in report

    halves = report_of([("a", 1, row(1.0)), ("a", 4, row(0.0)), ("b", 4, row(0.5))], held_out={"b"})["halves"]
    assert halves["held out"]["overall"] == {**row(0.5), "questions": 1}  # type: ignore[index]
    assert halves["chosen on"]["categories"]["1 multi-hop"]["recall@10"] == 1.0  # type: ignore[index]
    assert halves["chosen on"]["overall"]["questions"] == 2  # type: ignore[index]


def test_malformed_evidence_is_repaired_or_dropped_and_counted() -> None:
    quirks: Counter[str] = Counter()
    known = {"D8:6", "D9:17", "D11:26"}
    assert evidence_ids(["D8:6; D9:17", "D:11:26", "D", "D10:19"], known, quirks) == known
    assert quirks == {"evidence ids repaired": 3, "evidence ids dropped": 2}
    assert session_time("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_the_benchmark_runs_the_product_path_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY), encoding="utf-8")
    samples, quirks = load_samples(path)
    [sample] = samples
    assert [turn.dia_id for turn in sample.turns] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    assert sample.turns[2].text.endswith("[shares an image: a dog running on sand]")
    assert quirks["questions without evidence skipped"] == 1 and quirks["evidence ids dropped"] == 1

    report = run(samples, scale=6)
    assert report["turns"] == 4 and report["scaled_latency_ms"]["messages"] == 6  # type: ignore[index]
    assert report["categories"]["4 single-hop"]["mrr"] == 1.0  # type: ignore[index]
    assert report["overall"]["questions"] == 3  # type: ignore[index]
    assert 0.0 < report["overall"]["recall@10"] <= 1.0  # type: ignore[index]


@pytest.mark.parametrize("argv", [["--data", "missing.json"]])
def test_a_missing_data_file_is_a_clear_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from bench.locomo import main

    with pytest.raises(SystemExit):
        main(argv)
    assert "no LoCoMo file at missing.json" in capsys.readouterr().err


def test_an_unknown_conversation_held_out_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.locomo import main

    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY), encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["--data", str(path), "--held-out", "toy-1,conv-99"])
    assert "no conversation conv-99 in" in capsys.readouterr().err


def test_the_halves_show_recall_and_mrr_by_category(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.locomo import main

    path = tmp_path / "toy.json"
    path.write_text(json.dumps(TOY), encoding="utf-8")
    main(["--data", str(path), "--held-out", "toy-1"])
    printed = capsys.readouterr().out.splitlines()
    tables = {line.split()[0]: index for index, line in enumerate(printed) if line.startswith(("recall@10 ", "mrr "))}
    assert set(tables) == {"recall@10", "mrr"}
    for start in tables.values():
        header, chosen, held = printed[start : start + 3]
        assert header.endswith("1 multi-hop     2 temporal   4 single-hop")  # the categories asked, in order
        assert chosen.startswith("chosen on") and chosen.split()[-3:] == ["-", "-", "-"]  # no question there
        assert held.startswith("held out") and "-" not in held.split()
    single_hop_mrr = printed[tables["mrr"] + 2].split()[-1]
    assert single_hop_mrr == "1.000"  # as the report's own figure (the pet is found first)
