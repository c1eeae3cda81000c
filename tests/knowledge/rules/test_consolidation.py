"""The consolidation rules: which facts make a candidate group, and which answers code accepts, in EN and ZH."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from knowledge.records import MemoryRecord, Scope
from knowledge.rules.consolidation import (
    COMPRESS_AGE,
    COMPRESS_MIN,
    MAX_GROUPS,
    CandidateGroup,
    Outcome,
    broken_rule,
    candidate_groups,
    compressed_size,
    first_person,
    merged_visibility,
    night_of,
    written_from_memories,
)

ALICE = Scope("xiaoxiang", "cli:alice")
NOW = datetime(2027, 3, 10, 3, tzinfo=UTC)
DIM = 8


def fact(index: int, content: str, *, days_old: float = 0, **fields: object) -> MemoryRecord:
    made = NOW - timedelta(days=days_old)
    record = MemoryRecord(
        id=f"mem_{index:012x}",
        scope=ALICE,
        content=content,
        category="fact",
        importance=0.5,
        created_at=made,
        last_access=made,
        source="background_ai",
    )
    return replace(record, **fields)  # type: ignore[arg-type]


def direction(axis: int, lean: float = 0.0, towards: int = 1) -> np.ndarray:
    """A unit vector along `axis`, leaning a little towards `towards` (cosine with the axis: about 1 - lean²/2)."""
    vector = np.zeros(DIM, dtype=np.float32)
    vector[towards] = lean
    vector[axis] = 1.0
    return vector / np.linalg.norm(vector)


def groups_of(records: list[MemoryRecord], vectors: list[np.ndarray], since: datetime | None = None) -> list:
    return [(group.kind, group.ids) for group in candidate_groups(records, np.stack(vectors), NOW, since)]


@pytest.mark.parametrize(
    ("first", "second", "other"),
    [
        ("my locker code is 4711", "Alice's locker code is 4711", "Alice likes ramen"),
        ("我的储物柜密码是4711", "主人的储物柜密码是4711", "主人喜欢拉面"),
    ],
    ids=["en", "zh"],
)
def test_facts_close_in_meaning_and_in_words_are_a_duplicate_group_and_the_rest_is_not(
    first: str, second: str, other: str
) -> None:
    records = [fact(1, first), fact(2, second), fact(3, other)]
    found = groups_of(records, [direction(0), direction(0, 0.1), direction(2)])
    assert found == [("duplicates", [records[0].id, records[1].id])]  # the first-person one goes in with it


@pytest.mark.parametrize(
    ("one", "two"),
    [
        ("Alice's locker code is 4711", "Alice's locker code is 1234"),  # a changed code: another fact
        ("主人的储物柜密码是4711", "主人的储物柜密码是1234"),
        ("Alice flies to Rome on Friday", "Alice likes rainy days with a book"),  # few words in common
        ("主人下周二要去北京面试", "主人喜欢在下雨天看书"),
    ],
    ids=["en-number", "zh-number", "en-words", "zh-words"],
)
def test_a_different_number_or_too_few_words_in_common_is_no_duplicate_however_close_in_meaning(
    one: str, two: str
) -> None:
    assert groups_of([fact(1, one), fact(2, two)], [direction(0), direction(0)]) == []


def test_duplicates_are_looked_for_only_among_pairs_with_a_fact_new_since_the_last_pass() -> None:
    old = [fact(1, "Alice has a cat named Tom", days_old=5), fact(2, "Alice has a cat called Tom", days_old=4)]
    vectors = [direction(0), direction(0, 0.1)]
    last = NOW - timedelta(days=1)
    assert groups_of(old, vectors, since=last) == []  # compared on an earlier night already
    new = fact(3, "Alice has a cat, it is named Tom", days_old=0)
    assert groups_of([*old, new], [*vectors, direction(0, 0.05)], since=last) == [
        ("duplicates", [old[0].id, old[1].id, new.id])
    ]


def test_a_different_date_or_lifetime_keeps_facts_apart() -> None:
    records = [fact(1, "Alice has an interview", about=NOW), fact(2, "Alice has an interview")]
    assert groups_of(records, [direction(0), direction(0)]) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("my locker code is 4711", True),
        ("I'm allergic to peanuts", True),
        ("Alice is allergic to peanuts", False),
        ("我的储物柜密码是4711", True),
        ("主人对花生过敏", False),
        ("Idaho is where Alice grew up", False),
        ("主人说 I love 拉面", False),  # Chinese: an English "I" quoted in it does not speak as the user
        ("我 is how Alice writes her name in Chinese", False),  # English: a 我 quoted in it does not either
        ("我觉得 my Chinese is getting better", True),
        ("my favourite word is 我们", True),
    ],
)
def test_first_person_is_told_in_english_and_chinese(text: str, expected: bool) -> None:
    assert first_person(text) is expected


def test_first_person_facts_are_a_group_of_their_own_and_ended_or_replaced_facts_take_no_part() -> None:
    records = [
        fact(1, "my sister is Anna"),
        fact(2, "我住在杭州"),
        fact(3, "I was tired", until=NOW - timedelta(days=1), replaced_by="mem_000000000009"),
        replace(fact(4, "my favourite tea is oolong"), category="core"),
    ]
    found = groups_of(records, [direction(0), direction(2), direction(3), direction(4)])
    assert found == [("first_person", [records[0].id, records[1].id])]


def kind_of_ten(*, days_old: float = 40, start: int = 0, **fields: object) -> list[MemoryRecord]:
    return [fact(start + i, f"Alice tried recipe {i + 1}", days_old=days_old + i, **fields) for i in range(10)]


def test_ten_old_rarely_used_facts_of_one_kind_are_a_group_to_compress_into_three() -> None:
    records = kind_of_ten()
    vectors = [direction(5, 0.2 * (i % 3), towards=6) for i in range(10)]
    [group] = candidate_groups(records, np.stack(vectors), NOW, None)
    assert group.kind == "compress" and len(group.records) == 10 and group.most_kept == 3 == compressed_size(10)


@pytest.mark.parametrize(
    "change",
    [
        {"days_old": 20},  # younger than COMPRESS_AGE
        {"hits": 2},  # used
        {"verified": True},  # the user asked to remember it
        {"about": NOW - timedelta(days=60)},  # dated
        {"learned_in": "discord:channel:1"},  # learned elsewhere: another kind
    ],
    ids=["young", "used", "verified", "dated", "elsewhere"],
)
def test_a_young_used_verified_dated_or_elsewhere_learned_fact_is_never_compressed(change: dict[str, object]) -> None:
    records = kind_of_ten()
    days = change.pop("days_old", None)
    records[0] = replace(records[0], **change)  # type: ignore[arg-type]
    if days is not None:
        records[0] = replace(records[0], created_at=NOW - timedelta(days=float(days)))  # type: ignore[arg-type]
    vectors = [direction(5)] * 10
    assert groups_of(records, vectors) == []  # nine left: fewer than COMPRESS_MIN
    assert COMPRESS_AGE == timedelta(days=30) and COMPRESS_MIN == 10


def test_facts_of_another_kind_do_not_fill_a_kind() -> None:
    records = [*kind_of_ten()[:9], fact(99, "Alice visited Rome", days_old=45)]
    assert groups_of(records, [*[direction(5)] * 9, direction(1)]) == []


def test_a_night_asks_at_most_max_groups_questions() -> None:
    records = [fact(i, f"my thing number {i}") for i in range(20 * (MAX_GROUPS + 2))]
    vectors = [direction(i % DIM) for i in range(len(records))]
    assert len(candidate_groups(records, np.stack(vectors), NOW, None)) == MAX_GROUPS


def test_the_night_starts_at_its_hour_in_utc() -> None:
    assert night_of(datetime(2027, 3, 10, 3, 0, tzinfo=UTC), 3) == datetime(2027, 3, 10, 3, tzinfo=UTC)
    assert night_of(datetime(2027, 3, 10, 2, 59, tzinfo=UTC), 3) == datetime(2027, 3, 9, 3, tzinfo=UTC)


def test_a_merge_is_as_visible_as_its_least_visible_source() -> None:
    private, group, shared = fact(1, "x"), fact(2, "x", learned_in="g1"), fact(3, "x", learned_in="g1", shared=True)
    assert merged_visibility([group, replace(group, id="mem_2")]) == ("g1", False)
    assert merged_visibility([private, group]) == (None, False)  # never carried into the group
    assert merged_visibility([group, fact(4, "x", learned_in="g2")]) == (None, False)
    assert merged_visibility([shared, replace(shared, id="mem_3")]) == ("g1", True)
    assert merged_visibility([shared, group]) == ("g1", False)


def test_a_fact_written_from_memories_is_known_by_its_sources() -> None:
    assert written_from_memories(fact(1, "x", message_ids=("mem_000000000001", "msg_1")))
    assert not written_from_memories(fact(1, "x", message_ids=("msg_1",)))


def group(kind: str, *texts: str) -> CandidateGroup:
    return CandidateGroup(kind, tuple(fact(i, text) for i, text in enumerate(texts, 1)))  # type: ignore[arg-type]


DUPLICATES_EN = group("duplicates", "my locker code is 4711", "Alice locker code is 4711", "Alice likes tea")
DUPLICATES_ZH = group("duplicates", "我的储物柜密码是4711", "主人的储物柜密码是4711")


@pytest.mark.parametrize(
    ("candidates", "outcomes", "reason"),
    [
        (DUPLICATES_EN, [Outcome((1, 2), "Alice's locker code is 4711"), Outcome((3,), None)], None),
        (DUPLICATES_ZH, [Outcome((1, 2), "主人的储物柜密码是4711")], None),
        (DUPLICATES_EN, [Outcome((1, 4), "Alice's locker code is 4711")], "not in the list"),
        (DUPLICATES_EN, [Outcome((1, 2), "Alice's code is 4711"), Outcome((2,), None)], "named twice"),
        (DUPLICATES_EN, [Outcome((1, 2), "Alice has a locker")], "drops 4711"),
        (DUPLICATES_ZH, [Outcome((1, 2), "Alice's locker code is 4711")], "language"),
        (DUPLICATES_EN, [Outcome((), "x")], "names no fact"),
        (group("first_person", "my sister is Anna"), [Outcome((1,), "My sister is Anna")], "speaks as the user"),
        (group("first_person", "我妹妹叫安娜"), [Outcome((1,), "主人的妹妹叫安娜")], None),
        (group("first_person", "my cat", "my dog"), [Outcome((1, 2), "Alice has pets")], "one by one"),
    ],
)
def test_code_accepts_only_answers_that_keep_to_the_group_its_numbers_and_its_language(
    candidates: CandidateGroup, outcomes: list[Outcome], reason: str | None
) -> None:
    found = broken_rule(candidates, outcomes)
    assert found is None if reason is None else (found is not None and reason in found)


def test_a_compression_must_leave_at_most_three_in_ten() -> None:
    ten = CandidateGroup("compress", tuple(kind_of_ten()))
    into_four = [Outcome((1, 2, 3), "Alice tried recipes 1, 2 and 3")] + [
        Outcome(tuple(range(start, start + 2)), f"Alice tried recipes {start} and {start + 1}") for start in (4, 6)
    ]
    assert "at most 3" in (broken_rule(ten, [*into_four, Outcome((8, 9, 10), None)]) or "")
    into_three = [
        Outcome((1, 2, 3), "Alice tried recipes 1, 2 and 3"),
        Outcome((4, 5, 6), "Alice tried recipes 4, 5 and 6"),
        Outcome((7, 8, 9, 10), "Alice tried recipes 7, 8, 9 and 10"),
    ]
    assert broken_rule(ten, into_three) is None
