"""The small-talk rule, over a labelled set of short turns in English and Chinese: it misses no fact."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge.rules.small_talk import nothing_to_learn

TURNS = Path(__file__).with_name("small_talk_turns.tsv")


def _labelled() -> list[tuple[str, str | None, str]]:
    rows = []
    for line in TURNS.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            continue
        label, before, said = line.split("\t")
        rows.append((label, before or None, said))
    return rows


def test_the_labelled_set_is_a_few_hundred_turns_of_both_kinds_in_both_languages() -> None:
    rows = _labelled()
    assert len(rows) >= 300
    assert {label for label, _, _ in rows} == {"nothing", "learns"}
    for label in ("nothing", "learns"):
        said = [text for kind, _, text in rows if kind == label]
        assert any(text.isascii() for text in said) and any("\u4e00" <= char <= "\u9fff" for char in "".join(said))


def test_no_turn_that_carries_a_fact_or_an_answer_is_spared(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _labelled()
    missed = [(before, said) for label, before, said in rows if label == "learns" and nothing_to_learn(said, before)]
    assert missed == []
    trivial = [(before, said) for label, before, said in rows if label == "nothing"]
    spared = [turn for turn in trivial if nothing_to_learn(turn[1], turn[0])]
    with capsys.disabled():
        print(
            f"\nsmall talk: {len(spared)} of {len(trivial)} small-talk turns spared "
            f"({len(spared) / len(trivial):.0%}), "
            f"{len(spared)} of {len(rows)} turns of the set ({len(spared) / len(rows):.0%}); 0 of "
            f"{len(rows) - len(trivial)} fact-carrying turns"
        )
    # A rule that spares nothing would miss nothing too: most small talk must be spared.
    assert len(spared) >= 0.9 * len(trivial), [turn for turn in trivial if turn not in spared]


@pytest.mark.parametrize(
    ("said", "before", "spared"),
    [
        ("ok", None, True),
        ("ok", "Are you moving?", False),  # the answer to a question
        ("好的", "我们周末一起复习吧", False),  # an offer accepted
        ("yes", "What a day.", True),
        ("yes", "You must be exhausted.", False),  # a confirmation of what was said about the user
        ("thanks", "You must be exhausted.", True),  # an acknowledgement confirms nothing
        ("no", None, False),  # a negation is never small talk
        ("ok?", None, False),  # nor a question
        ("😭", None, False),  # a sad face says how the user is
        ("😂", None, True),
        ("ok 3", None, False),  # a number
        ("", None, False),
        ("...", None, False),
        ("ok\u200b\u200c", None, True),  # zero-width characters are not words
        ("okay thanks so much!!", None, True),
        ("haha my boss quit", None, False),
    ],
)
def test_each_part_of_the_rule(said: str, before: str | None, spared: bool) -> None:
    assert nothing_to_learn(said, before) is spared
