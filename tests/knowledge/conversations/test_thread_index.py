"""ThreadIndex: a past message's place in its conversation counts in finding it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from knowledge.conversations.thread_index import (
    RecallWeights,
    ThreadIndex,
    asks,
    names_as_subject,
    saying,
    without_names,
)
from knowledge.dates.windows import TimeWindow
from knowledge.records import StoredMessage
from knowledge.rules.discretion import Audience

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def message(number: int, text: str, speaker: str = "Alice", conversation: str = "dm", days: int = 0) -> StoredMessage:
    return StoredMessage(
        id=f"msg_{number}",
        persona_id="p",
        conversation_id=conversation,
        user_id="u",
        role="user" if speaker == "Alice" else "assistant",
        speaker_name=speaker,
        content=text,
        sent_at=START + timedelta(days=days, minutes=number),
    )


def thread_of(*messages: StoredMessage) -> ThreadIndex:
    """The messages in one conversation each, in order, with unit vectors along their own axes."""
    threads = ThreadIndex()
    vectors = np.eye(len(messages), dtype=np.float32)
    last: dict[str, int] = {}
    for row, stored in enumerate(messages):
        last[stored.conversation_id] = threads.append(stored, last.get(stored.conversation_id), vectors, words=3)
        assert last[stored.conversation_id] == row
    return threads


@pytest.mark.parametrize(
    ("text", "asking"),
    [
        ("What did you make?", True),
        ("你做了什么？", True),
        ("Look at this! [shares an image: a photo of a bowl?]", False),
        ("[photo: a bowl] What do you think?", True),
        ("I made a bowl.", False),
    ],
)
def test_a_message_asks_when_its_words_end_with_a_question_mark(text: str, asking: bool) -> None:
    assert asks(text) is asking


def test_a_name_counts_unless_it_only_addresses_someone_at_the_start() -> None:
    assert names_as_subject("What did Caroline research?", "Caroline")
    assert names_as_subject("what did caroline research", "Caroline")
    assert not names_as_subject("Carolines are many", "Caroline")  # whole words only
    assert not names_as_subject("Caroline, what did I tell you about the trip?", "Caroline")
    assert not names_as_subject("Hey 小祥！你还记得吗", "小祥")
    assert names_as_subject("Caroline, what did Caroline say about the trip?", "Caroline")


def test_the_answer_to_a_question_gains_what_the_question_scored() -> None:
    threads = thread_of(message(0, "What are you researching?", "Bot"), message(1, "Adoption agencies."))
    kept = np.ones(2, dtype=bool)
    # the question matches in both legs, its answer in neither
    similarity, lexical = np.array([0.9, 0.1]), np.array([5.0, 0.0])
    relevance = threads.relevance("what is she researching", similarity, lexical, kept)
    plain = ThreadIndex(RecallWeights(question=0.0, answer=0.0, context=0.0, next_meaning=0.0, previous_words=0.0))
    plain.append(message(0, "What are you researching?", "Bot"), None, np.eye(2, dtype=np.float32), 3)
    plain.append(message(1, "Adoption agencies."), 0, np.eye(2, dtype=np.float32), 3)
    without = plain.relevance("what is she researching", similarity, lexical, kept)
    assert relevance[1] - relevance[0] > without[1] - without[0]  # the answer gains on its question
    assert relevance[1] > without[1]


def test_messages_of_the_participant_a_query_names_count_more() -> None:
    threads = thread_of(message(0, "I love hiking", "Alice", "a"), message(1, "I love hiking", "Bob", "b"))
    kept = np.ones(2, dtype=bool)
    legs = np.array([0.5, 0.5]), np.array([1.0, 1.0])
    about_bob = threads.relevance("What does Bob love?", *legs, kept)
    assert about_bob[1] > about_bob[0]
    about_both = threads.relevance("What do Alice and Bob love?", *legs, kept)
    assert about_both[0] == about_both[1]  # naming everyone names no one in particular
    addressed = threads.relevance("Bob, what do I love?", *legs, kept)
    assert addressed[0] == addressed[1]


def test_rows_kept_out_score_nothing_and_do_not_set_the_scale() -> None:
    threads = thread_of(message(0, "tea"), message(1, "coffee"), message(2, "cocoa"))
    kept = np.array([True, True, False])
    relevance = threads.relevance("drinks", np.array([0.2, 0.4, 0.9]), np.array([0.0, 1.0, 9.0]), kept)
    assert relevance[2] == -np.inf
    assert 0.0 <= relevance[0] < relevance[1] <= 1.0


def test_visibility_follows_where_each_message_was_said_and_windows_when() -> None:
    threads = thread_of(
        message(0, "private", conversation="telegram:chat:7"),
        message(1, "in the group", conversation="telegram:chat:-100"),
        message(2, "the next day in private", conversation="telegram:chat:7", days=1),
    )
    group = Audience.of("telegram:chat:-100", group=True)
    assert threads.visible(group).tolist() == [False, True, False]
    assert threads.visible(Audience.of("telegram:chat:7", group=False)).all()
    day_two = TimeWindow(START + timedelta(days=1) - timedelta(hours=12), START + timedelta(days=2), "tomorrow")
    assert threads.said_during(day_two).tolist() == [False, False, True]


def test_names_leave_a_query_possessives_as_their() -> None:
    assert without_names("What did Caroline paint for Melanie?", ["Caroline", "Melanie"]) == "What did paint for ?"
    assert without_names("Where do Melanie's kids go?", ["Melanie"]) == "Where do their kids go?"
    assert without_names("小祥喜欢什么？", ["小祥"]) == "喜欢什么？"
    assert without_names("Carolines are many", ["Caroline"]) == "Carolines are many"  # whole words only


def test_the_participants_a_query_mentions_leave_its_meaning() -> None:
    threads = thread_of(message(0, "I love hiking", "Alice"), message(1, "Me too!", "小祥"))
    assert threads.without_participants("what does alice love?") == "what does love?"
    assert threads.without_participants("Alice, 小祥 said what?") == ", said what?"
    assert threads.without_participants("what does Bob love?") is None  # no participant mentioned
    assert threads.without_participants("Alice?") is None  # nothing left but names
    assert thread_of(message(0, "hi", "A")).without_participants("a trip to A city") is None


def test_a_message_that_says_more_counts_more() -> None:
    assert saying(0) == 0.0
    assert 0.0 < saying(2) < saying(8) < saying(16) == saying(40) == 1.0
    threads = ThreadIndex()
    vectors = np.eye(2, dtype=np.float32)
    threads.append(message(0, "haha yes!"), None, vectors, words=2)
    threads.append(
        message(1, "we hiked up the ridge at dawn and saw the whole valley", conversation="b"), None, vectors, 9
    )
    relevance = threads.relevance("hiking", np.array([0.5, 0.5]), np.array([1.0, 1.0]), np.ones(2, dtype=bool))
    assert relevance[1] > relevance[0]


def test_a_message_counts_more_in_the_sitting_of_a_strong_match() -> None:
    # the road trip is told at noon; a hike is mentioned in the same sitting and, alike, the next day
    threads = thread_of(
        message(0, "The road trip was wild"),
        message(1, "We went on a hike after it"),
        message(2, "We went on a hike", days=1),
    )
    kept = np.ones(3, dtype=bool)
    relevance = threads.relevance(
        "the hike after the road trip", np.array([0.9, 0.5, 0.5]), np.array([4.0, 1.0, 1.0]), kept
    )
    assert relevance[1] > relevance[2]
    # a pause longer than a sitting's gap (30 minutes) parts them, as a day does
    legs = np.array([0.9, 0.5]), np.array([4.0, 1.0])
    together = thread_of(message(0, "The road trip was wild"), message(20, "We went on a hike after it"))
    apart = thread_of(message(0, "The road trip was wild"), message(45, "We went on a hike after it"))
    query = "the hike after the road trip"
    assert apart.relevance(query, *legs, kept[:2])[1] < together.relevance(query, *legs, kept[:2])[1]
