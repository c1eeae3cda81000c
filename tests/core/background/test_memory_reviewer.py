"""MemoryReviewer: promote and decay reviews, searches between rounds, and the effects of each verdict."""

from __future__ import annotations

import pytest

from bot.app import App
from core.background.memory_reviewer import MemoryReviewer, last_verdict, search_requests
from core.errors import LLMError
from knowledge.journal.journal import Journal
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.records import MemoryChange, MemoryRecord, ReviewKind, Scope
from knowledge.rules.decay import MemoryPolicy, boosted, needs_promote_review
from personas.loader import Persona
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeError, FakeOpenAIServer

REVIEWER = "reviewer-model"


@pytest.fixture
def reviewer(app: App, kb: ChromaKnowledgeBase, journal: Journal, clock: FakeClock) -> MemoryReviewer:
    return MemoryReviewer(app.llm, kb, journal.changes, clock, kb.policy_for)


def pending(kb: ChromaKnowledgeBase, scope: Scope, content: str, importance: float, kind: ReviewKind) -> MemoryRecord:
    record = kb.add(scope, content, category="fact", source="background_ai", importance=importance)
    updated = kb.update(scope, record.id, MemoryChange(review_pending=kind))
    assert updated is not None
    return updated


def current(kb: ChromaKnowledgeBase, scope: Scope, record: MemoryRecord) -> MemoryRecord:
    [found] = kb.get(scope, [record.id])
    return found


def reviewed_again_on_next_boost(record: MemoryRecord) -> bool:
    """Whether the next real use of the memory would ask for another promote review."""
    return needs_promote_review(record, boosted(record, MemoryPolicy()), MemoryPolicy())


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("Stable fact. [PROMOTE]", "promote"),
        ("I considered [DELETE] but no. [KEEP]", "keep"),
        ("【delete】", "delete"),
        ("[ keep ]", "keep"),
        ("thinking… [SEARCH:ramen]", None),
        ("", None),
    ],
)
def test_the_last_verdict_token_decides(reply: str, verdict: str | None) -> None:
    assert last_verdict(reply) == verdict


def test_search_requests_are_read_tolerantly() -> None:
    assert search_requests("[SEARCH:ramen] 【search：拉面 口味】 [search : ramen]") == ["ramen", "拉面 口味"]


async def test_promote_makes_the_memory_core(
    reviewer: MemoryReviewer,
    persona: Persona,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    journal: Journal,
) -> None:
    birthday = pending(kb, alice, "主人的生日是5月3日", 2.6, "promote")
    fake_openai.script(REVIEWER, "生日是长期稳定的事实。[PROMOTE]")

    decision = await reviewer.review(persona, alice, birthday.id, "promote")

    assert (decision.verdict, decision.rounds, decision.searches) == ("promote", 1, [])
    after = current(kb, alice, birthday)
    assert (after.category, after.review_pending) == ("core", None)
    [entry] = journal.changes.changes(alice, birthday.id)
    assert (entry.action, entry.actor) == ("promote", "reviewer")
    assert decision.tokens > 0


async def test_keep_on_a_promote_review_is_not_reviewed_again(
    reviewer: MemoryReviewer, persona: Persona, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    tired = pending(kb, alice, "主人今天很累", 2.6, "promote")
    fake_openai.script(REVIEWER, "临时状态，不是核心记忆。[KEEP]")

    decision = await reviewer.review(persona, alice, tired.id, "promote")

    assert decision.verdict == "keep"
    after = current(kb, alice, tired)
    assert (after.category, after.review_pending, reviewed_again_on_next_boost(after)) == ("fact", None, False)
    assert after.importance == pytest.approx(2.6)


async def test_keep_on_a_decay_review_resets_importance(
    reviewer: MemoryReviewer,
    persona: Persona,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    clock: FakeClock,
    journal: Journal,
) -> None:
    allergy = pending(kb, alice, "主人对花生过敏", 0.45, "decay")
    clock.advance(days=30)
    fake_openai.script(REVIEWER, "过敏信息很重要。[KEEP]")

    decision = await reviewer.review(persona, alice, allergy.id, "decay")

    assert decision.verdict == "keep"
    after = current(kb, alice, allergy)
    assert after.importance == pytest.approx(0.5)
    assert after.last_access == clock.now()
    assert (after.decay_kept, after.review_pending) == (True, None)
    assert [entry.action for entry in journal.changes.changes(alice, allergy.id)] == ["keep"]


async def test_delete_removes_the_memory_with_history(
    reviewer: MemoryReviewer,
    persona: Persona,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    journal: Journal,
) -> None:
    stale = pending(kb, alice, "主人这周在赶报告", 0.4, "decay")
    fake_openai.script(REVIEWER, "短期计划，已经过去了。[DELETE]")

    decision = await reviewer.review(persona, alice, stale.id, "decay")

    assert decision.verdict == "delete"
    assert kb.get(alice, [stale.id]) == []
    [entry] = journal.changes.changes(alice, stale.id)
    assert (entry.action, entry.actor, entry.old_content) == ("delete", "reviewer", "主人这周在赶报告")


async def test_a_search_round_sends_results_back(
    reviewer: MemoryReviewer,
    persona: Persona,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    bob: Scope,
) -> None:
    ramen = pending(kb, alice, "主人最近常吃拉面", 2.6, "promote")
    kb.add(alice, "Alice's favourite ramen shop is Ichiran", category="fact", source="user")
    kb.add(bob, "Bob hates ramen", category="fact", source="user")
    fake_openai.script(REVIEWER, "先查一下相关记忆。[SEARCH:ramen]", "她有固定喜欢的拉面店，是长期喜好。[PROMOTE]")

    decision = await reviewer.review(persona, alice, ramen.id, "promote")

    assert (decision.verdict, decision.rounds, decision.searches) == ("promote", 2, ["ramen"])
    first, second = fake_openai.requests_for(REVIEWER)
    assert second.messages[:2] == first.messages
    assert second.messages[2] == {"role": "assistant", "content": "先查一下相关记忆。[SEARCH:ramen]"}
    results = second.messages[3]["content"]
    assert "Alice's favourite ramen shop is Ichiran" in results
    assert "Bob" not in results


async def test_no_verdict_in_three_rounds_keeps_the_memory(
    reviewer: MemoryReviewer, persona: Persona, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    memory = pending(kb, alice, "主人喜欢下雨天", 2.6, "promote")
    fake_openai.set_default(REVIEWER, "Hmm, hard to say. [SEARCH:rain]")

    decision = await reviewer.review(persona, alice, memory.id, "promote")

    assert (decision.verdict, decision.rounds) == ("keep", 3)
    assert decision.searches == ["rain", "rain"]  # nobody would read the results of a third search
    assert "no verdict" in decision.reason
    assert len(fake_openai.requests_for(REVIEWER)) == 3
    after = current(kb, alice, memory)
    assert (after.category, after.review_pending, reviewed_again_on_next_boost(after)) == ("fact", None, False)


async def test_promote_in_a_decay_review_means_keep(
    reviewer: MemoryReviewer, persona: Persona, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    memory = pending(kb, alice, "主人的猫叫Mochi", 0.45, "decay")
    fake_openai.script(REVIEWER, "This is important. [PROMOTE]")

    decision = await reviewer.review(persona, alice, memory.id, "decay")

    assert decision.verdict == "keep"
    after = current(kb, alice, memory)
    assert (after.category, after.importance, after.decay_kept) == ("fact", pytest.approx(0.5), True)


async def test_a_gone_memory_needs_no_call(
    reviewer: MemoryReviewer,
    persona: Persona,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    bob: Scope,
) -> None:
    bobs = pending(kb, bob, "Bob likes jazz", 2.6, "promote")
    decision = await reviewer.review(persona, alice, bobs.id, "promote")  # another scope's id is as good as gone
    assert (decision.verdict, decision.rounds) == ("gone", 0)
    assert fake_openai.requests_for(REVIEWER) == []
    assert current(kb, bob, bobs).review_pending == "promote"


async def test_the_prompt_has_the_memory_its_relatives_and_the_criteria(
    reviewer: MemoryReviewer,
    persona: Persona,
    kb: ChromaKnowledgeBase,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
    bob: Scope,
) -> None:
    memory = pending(kb, alice, "主人喜欢拉面", 2.6, "promote")
    kb.add(alice, "主人常去一兰拉面", category="fact", source="user")
    kb.add(bob, "Bob喜欢拉面", category="fact", source="user")
    fake_openai.script(REVIEWER, "[KEEP]", "[KEEP]")

    await reviewer.review(persona, alice, memory.id, "promote")
    kb.update(alice, memory.id, MemoryChange(review_pending="decay"))
    await reviewer.review(persona, alice, memory.id, "decay")

    promote, decay = fake_openai.requests_for(REVIEWER)
    system, user = promote.messages[0]["content"], promote.messages[1]["content"]
    assert "Core: stable long-term facts — name, birthday" in system
    assert 'Not core: temporary states ("主人今天很累")' in system
    assert "If you need to see other memories of 主人, write [SEARCH:keywords]" in system
    assert f"[{memory.id}] 主人喜欢拉面" in user and "主人常去一兰拉面" in user
    assert "Bob" not in user
    assert "Has a newer memory replaced it" in decay.messages[0]["content"]
    assert "[PROMOTE]" not in decay.messages[0]["content"]


async def test_a_model_failure_propagates_and_changes_nothing(
    reviewer: MemoryReviewer, persona: Persona, kb: ChromaKnowledgeBase, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    memory = pending(kb, alice, "主人喜欢拉面", 2.6, "promote")
    fake_openai.script(REVIEWER, FakeError(500, times=3))
    with pytest.raises(LLMError):
        await reviewer.review(persona, alice, memory.id, "promote")
    assert current(kb, alice, memory) == memory


async def test_a_review_no_longer_waited_for_is_settled_without_a_model_call(
    reviewer: MemoryReviewer,
    persona: Persona,
    kb: ChromaKnowledgeBase,
    journal: Journal,
    fake_openai: FakeOpenAIServer,
    alice: Scope,
) -> None:
    memory = pending(kb, alice, "主人喜欢拉面", 2.6, "promote")
    fake_openai.script(REVIEWER, "Lasting. [PROMOTE]")
    first = await reviewer.review(persona, alice, memory.id, "promote")
    again = await reviewer.review(persona, alice, memory.id, "promote")  # a duplicate request, or a retry
    assert (first.verdict, again.verdict) == ("promote", "settled")
    assert len(fake_openai.requests_for(REVIEWER)) == 1
    assert [change.action for change in journal.changes.changes(alice, memory.id)] == ["promote"]
