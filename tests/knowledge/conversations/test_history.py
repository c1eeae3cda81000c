"""Conversation history: every message searchable in its own scope, with when and by whom it was said."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from knowledge.conversations.history import ConversationHistory, date_words
from knowledge.conversations.message_log import MessageLog
from knowledge.conversations.working_memory import WorkingMemory
from knowledge.dates.windows import TimeWindow
from knowledge.records import MessageRole, Scope
from knowledge.search.embedding import Embedder
from tests.conftest import Backend

START = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


@pytest.fixture
def working_memory(backend: Backend) -> WorkingMemory:
    return WorkingMemory(MessageLog(backend.open()), window_size=4)


@pytest.fixture
def history(working_memory: WorkingMemory, embedder: Embedder, backend: Backend) -> ConversationHistory:
    return ConversationHistory(working_memory.log, embedder, backend.open())


def say(
    working_memory: WorkingMemory,
    scope: Scope,
    text: str,
    *,
    role: MessageRole = "user",
    speaker: str = "Alice",
    minutes: int = 0,
    conversation: str = "dm",
) -> str:
    return working_memory.append(
        scope.persona_id,
        conversation,
        role=role,
        user_id=scope.user_id,
        speaker_name=speaker,
        content=text,
        sent_at=START + timedelta(minutes=minutes),
    ).id


def test_every_message_is_found_with_its_time_and_speaker(working_memory, history, alice: Scope) -> None:  # type: ignore[no-untyped-def]
    say(working_memory, alice, "I went to a pottery class yesterday", minutes=0)
    say(working_memory, alice, "That sounds lovely! What did you make?", role="assistant", speaker="小祥", minutes=1)
    for minute in range(2, 12):  # enough to push the first messages out of a window of four
        say(working_memory, alice, f"filler message number {minute}", minutes=minute)
    assert history.index_pending() == 12
    assert history.index_pending() == 0  # caught up

    [hit] = history.search(alice, "pottery class", limit=1)
    assert hit.message.content == "I went to a pottery class yesterday"
    assert (hit.message.speaker_name, hit.message.role, hit.message.sent_at) == ("Alice", "user", START)
    [reply] = history.search(alice, "小祥 asked what I made", limit=1)
    assert (reply.message.speaker_name, reply.message.sent_at) == ("小祥", START + timedelta(minutes=1))


def test_an_answer_is_found_by_the_question_before_it(working_memory, history, alice: Scope) -> None:  # type: ignore[no-untyped-def]
    say(working_memory, alice, "I watched a film about whales", minutes=0)
    say(working_memory, alice, "What have you been researching lately?", role="assistant", speaker="小祥", minutes=1)
    answer = say(working_memory, alice, "Adoption agencies, mostly.", minutes=2)
    say(working_memory, alice, "I also bought new running shoes", minutes=3)
    history.index_pending()
    # The answer shares no word with the query: only its question matches, and hands it what it scored.
    found = [hit.message.id for hit in history.search(alice, "what is she researching?", limit=4)]
    assert answer in found[:2]
    assert date_words(START) == "Monday 8 May 2023"


def test_group_messages_stay_in_their_writers_scope(working_memory, history, alice: Scope, bob: Scope) -> None:  # type: ignore[no-untyped-def]
    secret = say(working_memory, alice, "my locker code is 4321", conversation="group", minutes=0)
    say(working_memory, bob, "nice weather today", speaker="Bob", conversation="group", minutes=1)
    say(working_memory, bob, "I am learning the cello", speaker="Bob", conversation="group", minutes=2)
    history.index_pending()

    hits = history.search(bob, "locker code 4321", limit=5)
    assert secret not in [hit.message.id for hit in hits] and len(hits) == 2
    # Alice's words are not even context of Bob's next message: no hit matches lexically.
    assert all(hit.lexical == 0 for hit in hits)
    assert [hit.message.id for hit in history.search(alice, "locker code", limit=5)] == [secret]
    assert history.search(Scope("another-persona", alice.user_id), "locker code") == []


def test_forget_removes_messages_and_every_index_entry(working_memory, history, alice: Scope, bob: Scope) -> None:  # type: ignore[no-untyped-def]
    say(working_memory, alice, "my ex Tom called me", minutes=0)
    say(working_memory, alice, "How did that feel?", role="assistant", speaker="小祥", minutes=1)
    say(working_memory, bob, "Tom is my colleague", speaker="Bob", minutes=2)
    history.index_pending()
    history.search(alice, "Tom")  # the scope's snapshot is loaded and must not outlive the forgetting

    assert history.forget(alice) == 2
    assert history.search(alice, "Tom") == [] and history.indexed_count(alice) == 0
    assert working_memory.log.messages_of(alice) == []
    assert [hit.message.speaker_name for hit in history.search(bob, "Tom")] == ["Bob"]


def test_forgetting_one_message_takes_it_out_of_its_neighbours_context(working_memory, history, alice: Scope) -> None:  # type: ignore[no-untyped-def]
    tom = say(working_memory, alice, "my ex Tom called me", minutes=0)
    say(working_memory, alice, "How did that feel?", role="assistant", speaker="小祥", minutes=1)
    say(working_memory, alice, "I adopted a kitten", minutes=2)
    history.index_pending()
    assert history.search(alice, "Tom", limit=1)[0].message.id == tom

    assert history.forget_messages(alice, [tom, "msg_of_someone_else"]) == 1
    hits = history.search(alice, "Tom", limit=5)
    assert tom not in [hit.message.id for hit in hits] and all(hit.lexical == 0 for hit in hits)
    assert history.indexed_count(alice) == 2


def test_a_message_forgotten_while_being_indexed_leaves_no_vector(
    working_memory: WorkingMemory, embedder: Embedder, backend: Backend, alice: Scope
) -> None:
    class ForgettingMidway:
        name, dim = embedder.name, embedder.dim

        def embed_queries(self, texts):  # type: ignore[no-untyped-def]
            return embedder.embed_queries(texts)

        def embed_passages(self, texts):  # type: ignore[no-untyped-def]
            history.forget(alice)  # /forget lands while the batch is being embedded
            return embedder.embed_passages(texts)

    history = ConversationHistory(working_memory.log, ForgettingMidway(), backend.open())
    say(working_memory, alice, "my bank PIN is 1234")
    assert history.index_pending() == 1
    assert history.indexed_count(alice) == 0 and history.search(alice, "PIN") == []


def test_a_catch_up_asked_while_another_runs_does_not_wait_and_is_run_by_the_one_running(
    working_memory: WorkingMemory, embedder: Embedder, backend: Backend, alice: Scope
) -> None:
    embedding, go_on = threading.Event(), threading.Event()

    class Slow:
        name, dim = embedder.name, embedder.dim

        def embed_queries(self, texts):  # type: ignore[no-untyped-def]
            return embedder.embed_queries(texts)

        def embed_passages(self, texts):  # type: ignore[no-untyped-def]
            embedding.set()
            assert go_on.wait(10)
            return embedder.embed_passages(texts)

    history = ConversationHistory(working_memory.log, Slow(), backend.open())
    say(working_memory, alice, "my sister is called Mei")
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(history.index_pending)
        assert embedding.wait(10)
        later = say(working_memory, alice, "she lives in Lisbon", minutes=1)  # stored after that round began
        assert history.index_pending() == 0  # returns at once: the round running runs one more
        go_on.set()
        assert running.result(timeout=10) == 2
    assert [hit.message.id for hit in history.search(alice, "Lisbon", limit=1)] == [later]


def test_the_index_survives_a_restart(
    working_memory, history, embedder: Embedder, backend: Backend, alice: Scope
) -> None:  # type: ignore[no-untyped-def]
    history.search(alice, "anything")  # the scope's index is held, so the messages below are added one by one
    say(working_memory, alice, "I was born in Lyon", minutes=0)
    say(working_memory, alice, "Lyon! Do you miss it?", role="assistant", speaker="小祥", minutes=1)
    say(working_memory, alice, "Only the food", minutes=2)
    history.index_pending()
    reopened = ConversationHistory(working_memory.log, embedder, backend.open())
    assert reopened.index_pending() == 0
    assert reopened.search(alice, "where was I born", limit=1)[0].message.content == "I was born in Lyon"

    def ranked(searched: ConversationHistory) -> list[tuple[str, float]]:
        return [(hit.message.id, round(hit.relevance, 5)) for hit in searched.search(alice, "Lyon food", limit=3)]

    assert ranked(reopened) == ranked(history)  # loaded at once or grown message by message: the same index


def test_a_different_embedder_starts_the_index_afresh(
    working_memory, history, embedder: Embedder, backend: Backend, alice: Scope
) -> None:  # type: ignore[no-untyped-def]
    say(working_memory, alice, "I was born in Lyon")
    history.index_pending()

    class Other:
        name, dim = "another-model", 3

        def embed_queries(self, texts):  # type: ignore[no-untyped-def]
            return np.ones((len(texts), 3), dtype=np.float32) / np.sqrt(3)

        embed_passages = embed_queries

    reindexed = ConversationHistory(working_memory.log, Other(), backend.open())
    assert reindexed.indexed_count(alice) == 0
    assert reindexed.index_pending() == 1
    assert reindexed.search(alice, "Lyon", limit=1)[0].message.content == "I was born in Lyon"


def test_an_edited_message_is_found_by_its_new_words_and_a_deleted_one_not_at_all(
    working_memory: WorkingMemory, history: ConversationHistory, alice: Scope
) -> None:
    working_memory.append(
        alice.persona_id,
        "dm",
        role="user",
        user_id=alice.user_id,
        speaker_name="Alice",
        content="my favourite band is Radiohead",
        sent_at=START,
        source_id="telegram:1:5",
    )
    working_memory.append(
        alice.persona_id,
        "dm",
        role="user",
        user_id=alice.user_id,
        speaker_name="Alice",
        content="my bank pin is 4821",
        sent_at=START,
        source_id="telegram:1:6",
    )
    history.index_pending()
    edited = history.edit("telegram:1:5", "my favourite band is Portishead")
    assert edited is not None and edited.content == "my favourite band is Portishead"
    assert history.edit("telegram:1:404", "anything") is None
    [hit] = history.search(alice, "Portishead", limit=1)
    assert hit.message.content == "my favourite band is Portishead"
    assert all("Radiohead" not in hit.message.content for hit in history.search(alice, "Radiohead", limit=5))

    deleted = history.by_source("telegram:1:6")
    assert deleted is not None and history.forget_messages(alice, [deleted.id]) == 1
    assert history.by_source("telegram:1:6") is None
    assert all("4821" not in hit.message.content for hit in history.search(alice, "bank pin 4821", limit=5))
    assert history.indexed_count(alice) == 1


def test_a_named_time_recalls_only_what_was_said_then_and_since_until_keeps_to_it(  # type: ignore[no-untyped-def]
    working_memory, history, alice: Scope
) -> None:
    say(working_memory, alice, "We had hotpot for dinner", minutes=0)
    say(working_memory, alice, "We had hotpot for dinner again", minutes=3 * 24 * 60)  # three days later
    say(working_memory, alice, "Work was busy", minutes=3 * 24 * 60 + 5)
    history.index_pending()
    later = START + timedelta(days=3, hours=1)
    first_day = TimeWindow(START.replace(hour=0, minute=0), START.replace(hour=0, minute=0) + timedelta(days=1), "x")

    unaware = [hit.message.content for hit in history.search(alice, "hotpot for dinner", limit=2)]
    assert sorted(unaware) == ["We had hotpot for dinner", "We had hotpot for dinner again"]  # said at any time
    recalled = history.recall(alice, "what did we have for dinner", window=first_day, limit=3)
    assert [hit.message.content for hit in recalled] == ["We had hotpot for dinner"]  # only what was said then
    # a window whose messages are covered elsewhere (a memory made from them) still keeps the others out
    first = recalled[0].message.id
    assert history.recall(alice, "dinner", window=first_day, limit=3, exclude=[first]) == []
    empty_day = TimeWindow(START + timedelta(days=1), START + timedelta(days=2), "x")
    recalled = history.recall(alice, "what did we have for dinner", window=empty_day, limit=3)
    assert len(recalled) == 3  # nothing said then: what was said at any time
    three_days_later = TimeWindow(later - timedelta(hours=2), later, "today")
    recalled = history.recall(alice, "what did we have for dinner", window=three_days_later, limit=1)
    assert [hit.message.content for hit in recalled] == ["We had hotpot for dinner again"]

    during = history.search(alice, "hotpot", limit=5, during=three_days_later)  # --since/--until: strictly
    assert {hit.message.content for hit in during} == {"We had hotpot for dinner again", "Work was busy"}
    assert history.search(alice, "hotpot", during=TimeWindow(later, later + timedelta(days=1), "x")) == []


def test_a_query_is_compared_in_meaning_without_the_participants_names(
    working_memory: WorkingMemory, embedder: Embedder, backend: Backend, alice: Scope
) -> None:
    asked: list[str] = []

    class Recording:
        name, dim = embedder.name, embedder.dim

        def embed_queries(self, texts):  # type: ignore[no-untyped-def]
            asked.extend(texts)
            return embedder.embed_queries(texts)

        def embed_passages(self, texts):  # type: ignore[no-untyped-def]
            return embedder.embed_passages(texts)

    history = ConversationHistory(working_memory.log, Recording(), backend.open())
    say(working_memory, alice, "Hi 小祥! I made a bowl at pottery", minutes=0)
    say(working_memory, alice, "Lovely, Alice! What colour is it?", role="assistant", speaker="小祥", minutes=1)
    history.index_pending()

    [hit] = history.recall(alice, "What did Alice make at pottery?", window=None, limit=1)
    assert hit.message.content == "Hi 小祥! I made a bowl at pottery"
    assert asked == ["What did make at pottery?"]  # its words are the whole message's, its meaning without her name
    history.search(alice, "what did 小祥's friend make", limit=1)
    assert asked[1:] == ["what did their friend make"]
    asked.clear()
    history.search(alice, "what did Bob make", limit=1)  # no participant named: embedded once
    assert asked == ["what did Bob make"]
