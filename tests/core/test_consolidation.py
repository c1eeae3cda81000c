"""Nightly consolidation end to end on a fake clock: near-duplicates merged, first-person facts rewritten, old
rarely used facts compressed, once a night per active scope with catch-up, answers checked (retried, then a dead
letter), forgets reaching what was merged, and discretion, in EN and ZH, on SQLite and on PostgreSQL.

The rules: docs/concepts/memory.md#nightly-consolidation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.app import App, build_app
from bot.config import Settings
from core.background.scheduler import CONSOLIDATION_JOB
from knowledge.forget.privacy_scan import scan_directory
from knowledge.records import MemoryChange, MemoryRecord, Scope
from knowledge.rules.consolidation import night_of, pass_name
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock
from tests.fakes.crash import CrashAt
from tests.fakes.messages import make_message
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


@pytest.mark.parametrize(
    ("said", "stored", "rewritten"),
    [
        ("my sister is Anna, by the way", "my sister is Anna", "Alice's sister is Anna"),
        ("我妹妹叫小美", "我妹妹叫小美", "主人的妹妹叫小美"),
    ],
    ids=["en", "zh"],
)
async def test_a_first_person_fact_is_rewritten_about_the_user_in_its_language_and_the_change_logged(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer, said: str, stored: str, rewritten: str
) -> None:
    fake_openai.set_default(MONITOR, monitor({said[:4]: f"[ADD] {stored}"}, lambda listed: f"[REWRITE 1] {rewritten}"))
    await tell(app, clock, said)
    [before] = facts(app)
    assert await nightly(app) == 1
    [after] = facts(app)
    assert (after.id, after.content) == (before.id, rewritten)
    [prompt] = [r for r in fake_openai.requests_for(MONITOR) if "<<<FACTS" in str(r.body)]
    assert "first person" in prompt_text(prompt) and "Alice" in prompt_text(prompt)  # the user's name, where known
    [change] = [c for c in app.journal.changes.changes(ALICE) if c.action == "rewrite"]
    assert (change.memory_id, change.old_content, change.new_content) == (before.id, stored, rewritten)


KINDS = {
    "en": ["pasta", "curry", "soup", "bread", "salad", "risotto", "taco", "dumpling", "pie", "stew"],
    "zh": ["意大利面", "咖喱", "汤", "面包", "沙拉", "饺子", "馅饼", "炖菜", "寿司", "蛋糕"],
}


def recipe(case: str, dish: str) -> str:
    return f"Alice tried a new {dish} recipe" if case == "en" else f"主人试做了{dish}"


def into_three(listed: list[str]) -> str:
    """Ten facts folded into three lines."""
    parts = [listed[0:3], listed[3:6], listed[6:]]
    return "\n".join(
        f"[MERGE {','.join(str(listed.index(fact) + 1) for fact in part)}] " + " / ".join(part) for part in parts
    )


@pytest.mark.parametrize("case", sorted(KINDS))
async def test_ten_old_rarely_used_facts_of_one_kind_become_three_and_a_dated_or_verified_one_is_kept(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer, case: str
) -> None:
    fake_openai.set_default(MONITOR, monitor({}, into_three))
    kb = app.knowledge
    plain = [kb.add(ALICE, recipe(case, dish), category="fact", source="background_ai") for dish in KINDS[case]]
    dated = kb.add(ALICE, recipe(case, "pizza"), category="fact", source="background_ai", about=clock.now())
    verified = kb.add(ALICE, recipe(case, "ramen"), category="fact", source="user", verified=True)
    clock.advance(days=29)
    await tell(app, clock, "hi")  # active
    assert await nightly(app) == 1
    assert consolidation_requests(fake_openai) == []  # not old enough yet
    clock.advance(days=1)
    assert await nightly(app) == 1
    [asked] = consolidation_requests(fake_openai)
    assert sorted(asked) == sorted(record.content for record in plain)
    left = {record.id: record for record in facts(app)}
    assert dated.id in left and verified.id in left
    folded = [record for record in left.values() if record.id not in {dated.id, verified.id}]
    assert len(folded) == 3
    assert sorted(source for record in folded for source in record.message_ids) == sorted(r.id for r in plain)


async def test_an_answer_that_breaks_a_rule_is_asked_again_then_kept_as_a_dead_letter_and_changes_nothing(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    turns, lines, merged = CASES["en"]
    answers = iter(["[MERGE 1,5] Alice's locker code is 4711", "Sure! Here you go.", f"[MERGE 1,2] {merged}"])
    fake_openai.set_default(MONITOR, monitor(turns, lambda listed: next(answers)))
    await tell(app, clock, *lines)
    before = sorted(record.content for record in facts(app))
    assert await nightly(app) == 1
    assert sorted(record.content for record in facts(app)) == before  # nothing half-applied
    [letter] = app.journal.jobs.dead_letters(ALICE)
    assert letter.kind == "consolidation" and "[MERGE" in letter.error.upper() + str(letter.payload["output"])
    assert "not" in letter.error  # why: the second answer was not in the format
    [retry] = [r for r in fake_openai.requests_for(MONITOR) if "cannot be used" in prompt_text(r)]
    assert "not in the list" in prompt_text(retry)  # the model is told what was wrong

    clock.advance(days=1)
    assert await nightly(app) == 1  # the next night asks again
    assert [record.content for record in facts(app)] == [merged]


async def test_a_forget_of_one_source_deletes_the_merged_fact_and_leaves_no_byte_of_it(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    merged = "Alice keeps her passport in the blue drawer QZX"
    turns = {
        "passport": "[ADD] my passport is in the blue drawer",
        "drawer": "[ADD] Alice's passport is in the blue drawer",
    }
    fake_openai.set_default(MONITOR, monitor(turns, lambda listed: f"[MERGE 1,2] {merged}"))
    alice = Person(app.companion, clock)
    for line, source_id in (("my passport is in the blue drawer", "m1"), ("the drawer, the blue one", "m2")):
        result = await app.companion.handle(
            make_message(line, user_id=ALICE.user_id, speaker_name="Alice", source_id=source_id, sent_at=clock.now())
        )
        await result.text()
        await app.companion.tasks.drain()
    assert alice and len(facts(app)) == 2
    await nightly(app)
    [fact] = facts(app)
    assert fact.content == merged

    assert await app.companion.message_deleted("m1")  # deleted on its platform: one source's message
    assert facts(app) == []
    app.knowledge.compact()
    report = await asyncio.to_thread(scan_directory, app.settings.storage.data_dir, "QZX")
    assert report.in_files == {} and report.in_rows == {}, (report.in_files, report.in_rows)


async def test_a_merge_of_a_private_and_a_group_fact_is_private_and_of_one_group_stays_in_it(
    app: App, clock: FakeClock, fake_openai: FakeOpenAIServer
) -> None:
    turns, lines, merged = CASES["en"]
    fake_openai.set_default(MONITOR, monitor(turns, lambda listed: f"[MERGE 1,2] {merged}"))
    await tell(app, clock, lines[0], group=True)
    await tell(app, clock, lines[1])
    await nightly(app)
    [fact] = facts(app)
    assert (fact.learned_in, fact.shared) == (None, False)  # never carried into the group
    await Person(app.companion, clock, conversation_id=GROUP).say("what was that locker code?", group=True)
    assert merged not in prompt_text(fake_openai.requests_for(CHAT)[-1])

    clock.advance(days=1)
    app.knowledge.delete(ALICE, [fact.id])
    await tell(app, clock, *lines, group=True)
    await nightly(app)
    [fact] = facts(app)
    assert fact.learned_in == GROUP


async def test_a_crash_after_the_answer_asks_no_model_again_and_writes_the_merge_once(
    settings: Settings, fake_openai: FakeOpenAIServer, clock: FakeClock, embedder: Embedder, tmp_path: Path
) -> None:
    turns, lines, merged = CASES["en"]
    fake_openai.set_default(MONITOR, monitor(turns, lambda listed: f"[MERGE 1,2] {merged}"))
    mine = settings.changed(storage={"data_dir": tmp_path / "data"})
    crash = CrashAt("consolidation: group 1 answered")
    async with await build_app(mine, clock=clock, embedder=embedder, backoff=(0.01,), crash_point=crash) as first:
        await tell(first, clock, *lines)
        await nightly(first)
        assert len(facts(first)) == 2 and crash.passed[-1] == "consolidation: group 1 answered"
    async with await build_app(mine, clock=clock, embedder=embedder, backoff=(0.01,)) as second:
        await second.start(schedule=False)  # resumes the job left pending
        await second.companion.tasks.drain()
        assert [record.content for record in facts(second)] == [merged]
        assert len(consolidation_requests(fake_openai)) == 1
        assert await nightly(second) == 0


async def test_at_start_the_night_missed_while_stopped_is_caught_up_and_a_setting_turns_it_off(
    settings: Settings, fake_openai: FakeOpenAIServer, clock: FakeClock, embedder: Embedder, tmp_path: Path
) -> None:
    turns, lines, merged = CASES["zh"]
    fake_openai.set_default(MONITOR, monitor(turns, lambda listed: f"[MERGE 1,2] {merged}"))
    off = settings.changed(storage={"data_dir": tmp_path / "data"}, memory={"consolidation": False})
    async with await build_app(off, clock=clock, embedder=embedder, backoff=(0.01,)) as app:
        await tell(app, clock, *lines)
        await app.start()
        assert CONSOLIDATION_JOB not in (app.scheduler.jobs() if app.scheduler else {})
        assert await nightly(app) == 0 and len(facts(app)) == 2
    clock.advance(days=3)  # stopped over three nights
    on = off.changed(memory={"consolidation": True, "consolidation_hour": 5})
    async with await build_app(on, clock=clock, embedder=embedder, backoff=(0.01,)) as app:
        await app.start()
        await app.companion.tasks.drain()
        assert [record.content for record in facts(app)] == [merged]
        assert app.scheduler is not None and str(app.scheduler.jobs()[CONSOLIDATION_JOB]).count("hour='5'") == 1
        assert app.passes.last(pass_name(ALICE)) == night_of(clock.now(), 5)
