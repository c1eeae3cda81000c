"""The profile store on both backends: marked when facts change, due at most daily, cleared by a forget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from knowledge.forget.target import NOTHING, ForgetTarget
from knowledge.journal.profiles import Profile, Profiles
from knowledge.records import Scope
from tests.conftest import Backend

NOW = datetime(2026, 1, 5, 12, tzinfo=UTC)
ALICE = Scope("xiaoxiang", "telegram:101")
BOB = Scope("xiaoxiang", "telegram:202")
PORTRAIT = "Alice is a nurse in Leeds; her sister Anna visits on Sundays. She loves ramen."


def written(at: datetime, text: str = PORTRAIT, ids: tuple[str, ...] = ("mem_1", "mem_2", "mem_3")) -> Profile:
    return Profile(text, ids, "basis1", "background", at)


def test_a_scope_is_due_once_its_facts_changed_and_then_at_most_once_a_day(backend: Backend) -> None:
    profiles = Profiles(backend.open())
    assert profiles.due(NOW) == []
    profiles.mark_changed(ALICE, NOW)
    assert profiles.due(NOW) == [ALICE]  # never written: due at once
    profiles.write(ALICE, written(NOW), requested_at=NOW)
    assert profiles.due(NOW) == [] and profiles.get(ALICE) == written(NOW)
    profiles.mark_changed(ALICE, NOW + timedelta(hours=2))
    assert profiles.due(NOW + timedelta(hours=23)) == []  # written today: the change waits
    assert Profiles(backend.open()).due(NOW + timedelta(days=1)) == [ALICE]  # another process sees it too
    assert profiles.get(BOB) is None


def test_a_change_marked_while_the_profile_was_written_keeps_the_scope_marked(backend: Backend) -> None:
    profiles = Profiles(backend.open())
    profiles.mark_changed(ALICE, NOW)
    requested = NOW + timedelta(minutes=1)
    profiles.mark_changed(ALICE, NOW + timedelta(minutes=2))  # kept: the earliest change counts
    profiles.write(ALICE, written(NOW + timedelta(minutes=3)), requested_at=requested)
    assert profiles.due(NOW + timedelta(days=2)) == []  # the earliest change was before the request: settled
    profiles.mark_changed(ALICE, NOW + timedelta(minutes=5))
    profiles.settle(ALICE, requested_at=NOW + timedelta(minutes=4))
    assert profiles.due(NOW + timedelta(days=2)) == [ALICE]  # marked after the request: still to do


def test_a_forget_of_one_of_its_memories_or_of_words_it_carries_clears_it_to_be_written_again(
    backend: Backend,
) -> None:
    profiles = Profiles(backend.open())
    profiles.write(ALICE, written(NOW), requested_at=NOW)
    assert profiles.erase(ALICE, {"mem_9"}, ForgetTarget.of_phrase("my cat"), at=NOW) == 0
    assert profiles.erase(ALICE, {"mem_2"}, NOTHING, at=NOW) == 1
    assert profiles.get(ALICE) is None
    assert profiles.due(NOW + timedelta(days=1)) == [ALICE]  # written again later, from what remains
    profiles.write(ALICE, written(NOW + timedelta(days=1)), requested_at=NOW + timedelta(days=1))
    assert profiles.erase(ALICE, set(), ForgetTarget.of_phrase("my sister Anna"), at=NOW) == 1
    assert profiles.get(ALICE) is None


def test_chinese_text_is_kept_and_matched_as_written(backend: Backend) -> None:
    profiles = Profiles(backend.open())
    portrait = "主人是护士，住在上海；妹妹小美每周日来看她。喜欢拉面。"
    profiles.write(ALICE, written(NOW, portrait), requested_at=NOW)
    assert profiles.get(ALICE).text == portrait  # type: ignore[union-attr]
    assert profiles.erase(ALICE, set(), ForgetTarget.of_phrase("妹妹小美"), at=NOW) == 1


def test_forgetting_everything_deletes_the_row_and_a_hand_written_profile_settles_nothing(backend: Backend) -> None:
    profiles = Profiles(backend.open())
    profiles.mark_changed(ALICE, NOW)
    by_hand = Profile(PORTRAIT, (), "", "operator", NOW)
    profiles.write(ALICE, by_hand, requested_at=None)
    assert profiles.get(ALICE) == by_hand and profiles.due(NOW + timedelta(days=1)) == [ALICE]
    profiles.write(BOB, written(NOW), requested_at=NOW)
    assert profiles.forget(ALICE) == 1
    assert profiles.get(ALICE) is None and profiles.last_written(ALICE) is None and profiles.due(NOW) == []
    assert profiles.get(BOB) is not None
