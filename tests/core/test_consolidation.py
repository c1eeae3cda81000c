"""Nightly consolidation end to end on a fake clock: near-duplicates merged, first-person facts rewritten, old
rarely used facts compressed, once a night per active scope with catch-up, answers checked (retried, then a dead
letter), forgets reaching what was merged, and discretion, in EN and ZH, on SQLite and on PostgreSQL.

The rules: docs/concepts/memory.md#nightly-consolidation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import pytest

from bot.app import App
from knowledge.forget.privacy_scan import scan_directory
from knowledge.records import MemoryChange, MemoryRecord, Scope
from knowledge.rules.consolidation import pass_name
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT, MONITOR, SUMMARIZER, Answer, Body, Person, monitor_rules, prompt_text

ALICE = Scope("xiaoxiang", "cli:alice")
GROUP = "discord:channel:42"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2027, 1, 4, 10, tzinfo=UTC))


def facts_of(body: Body) -> list[str]:
    """The facts a consolidation prompt lists, without their numbers."""
    listed = prompt_text(body).split("<<<FACTS\n", 1)[1].split("\nFACTS>>>", 1)[0]
    return [line.split("] ", 1)[1] for line in listed.splitlines()]


def consolidation_requests(fake: FakeOpenAIServer) -> list[list[str]]:
    return [facts_of(request.body) for request in fake.requests_for(MONITOR) if "<<<FACTS" in str(request.body)]


def monitor(turns: Mapping[str, Answer], consolidate: Callable[[list[str]], str]) -> Callable[[Body], str]:
    """The monitor's model: ops by what the user said, and `consolidate`'s lines for a list of facts."""
    by_turn = monitor_rules(turns)
    return lambda body: consolidate(facts_of(body)) if "<<<FACTS" in prompt_text(body) else by_turn(body)


@pytest.fixture(autouse=True)
def models(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_default(CHAT, "嗯嗯")
    fake_openai.set_default(SUMMARIZER, "They chatted.")


async def tell(app: App, clock: FakeClock, *lines: str, group: bool = False) -> None:
    alice = Person(app.companion, clock, conversation_id=GROUP if group else None)
    for line in lines:
        await alice.say(line, group=group)
        await app.companion.tasks.drain()
        clock.advance(minutes=1)


async def nightly(app: App) -> int:
    """The nightly pass as the scheduler runs it: the scopes due submitted, then their jobs."""
    submitted = await app.lifecycle.plan_consolidation()
    await app.companion.tasks.drain()
    return submitted


def facts(app: App, scope: Scope = ALICE) -> list[MemoryRecord]:
    return app.knowledge.memories(scope, categories=["fact"])


CASES = {
    "en": (
        {"my locker": "[ADD] my locker code is 4711", "Alice's locker": "[ADD] Alice locker code is 4711"},
        ["my locker code is 4711 btw", "Alice's locker, remember: 4711"],
        "Alice's locker code is 4711",
    ),
    "zh": (
        {"我的柜子": "[ADD] 我的储物柜密码是4711", "健身房": "[ADD] 主人在健身房的储物柜密码是4711"},
        ["我的柜子密码是4711", "健身房那个柜子，4711"],
        "主人在健身房的储物柜密码是4711",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_near_duplicates_become_one_fact_once_a_night_with_their_uses_summed_and_the_merge_logged(
    any_app: App, clock: FakeClock, fake_openai: FakeOpenAIServer, case: str
) -> None:
    turns, lines, merged = CASES[case]
    fake_openai.set_default(MONITOR, monitor(turns, lambda listed: f"[MERGE 1,2] {merged}"))
    await tell(any_app, clock, *lines)
    sources = sorted(facts(any_app), key=lambda record: record.created_at)
    assert len(sources) == 2
    any_app.knowledge.update(ALICE, sources[0].id, MemoryChange(hits=2))  # each shaped replies
    any_app.knowledge.update(ALICE, sources[1].id, MemoryChange(hits=1))

    assert await nightly(any_app) == 1
    [fact] = facts(any_app)
    assert fact.content == merged and fact.hits == 3
    assert fact.message_ids[:2] == (sources[0].id, sources[1].id)  # its sources, then what they were learned from
    assert set(sources[0].message_ids) | set(sources[1].message_ids) <= set(fact.message_ids)
    assert consolidation_requests(fake_openai) == [[source.content for source in sources]]
    logged = any_app.journal.changes.changes(ALICE)
    merges = {
        (change.memory_id, change.old_content, change.new_content) for change in logged if change.action == "merge"
    }
    assert merges == {
        (fact.id, None, merged),
        (sources[0].id, sources[0].content, merged),
        (sources[1].id, sources[1].content, merged),
    }

    assert await nightly(any_app) == 0  # the same night: done
    clock.advance(days=1)
    assert await nightly(any_app) == 1  # the next night: looked at again, nothing new to ask about
    assert len(consolidation_requests(fake_openai)) == 1
