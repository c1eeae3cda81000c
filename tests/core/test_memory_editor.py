"""MemoryEditor: operator edits, imports and forgetting, each written to the change log, in one scope only."""

from __future__ import annotations

from dataclasses import replace

from core.companion import Companion
from knowledge.journal.journal import Journal
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.memory.memory_file import ImportPlan
from knowledge.records import MemoryChange, MemoryRecord, Scope
from tests.fakes.clock import FakeClock


def changes(journal: Journal, scope: Scope) -> list[tuple[str, str, str, str | None, str | None, str]]:
    return [
        (change.memory_id, change.action, change.actor, change.old_content, change.new_content, change.detail)
        for change in journal.changes.changes(scope)
    ]


async def test_an_edit_logs_old_and_new_text_before_it_changes_the_memory(
    companion: Companion, kb: ChromaKnowledgeBase, journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    record = kb.add(alice, "Alice lives in Beijing", category="fact", source="user")
    clock.advance(days=2)
    edited = companion.editor.edit(record, MemoryChange(content="Alice lives in Shanghai", category="core"))
    assert edited is not None and (edited.content, edited.category) == ("Alice lives in Shanghai", "core")
    assert edited.last_access == record.last_access  # only a new importance counts as use
    assert changes(journal, alice) == [
        (
            record.id,
            "edit",
            "operator",
            "Alice lives in Beijing",
            "Alice lives in Shanghai",
            "text, category fact -> core",
        )
    ]


async def test_a_new_importance_counts_from_now(
    companion: Companion, kb: ChromaKnowledgeBase, journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    record = kb.add(alice, "Alice plays the cello", category="fact", source="user")
    clock.advance(days=30)  # long faded
    edited = companion.editor.edit(kb.get(alice, [record.id])[0], MemoryChange(importance=2.0))
    assert edited is not None and (edited.importance, edited.last_access) == (2.0, clock.now())
    [(_, action, _, old, new, detail)] = changes(journal, alice)
    assert (action, old, new) == ("edit", "Alice plays the cello", "Alice plays the cello")
    assert detail.endswith("-> 2.00")


async def test_an_edit_of_another_scopes_memory_changes_nothing(
    companion: Companion, kb: ChromaKnowledgeBase, alice: Scope, bob: Scope
) -> None:
    bobs = kb.add(bob, "Bob's PIN is 1234", category="fact", source="user")
    posing = replace(bobs, scope=alice)  # an id of Bob's, claimed for Alice's scope
    assert companion.editor.edit(posing, MemoryChange(content="leaked")) is None
    assert kb.get(bob, [bobs.id])[0].content == "Bob's PIN is 1234"


async def test_forgetting_deletes_only_the_scopes_memories_and_logs_no_content(
    companion: Companion, kb: ChromaKnowledgeBase, journal: Journal, alice: Scope, bob: Scope
) -> None:
    mine = kb.add(alice, "Alice's ex is called Tom", category="fact", source="user")
    theirs = kb.add(bob, "Bob's ex is called Tim", category="fact", source="user")
    assert companion.editor.forget(alice, [mine.id, theirs.id], actor="user") == 1
    assert kb.get(alice, [mine.id]) == [] and kb.get(bob, [theirs.id]) != []
    assert changes(journal, alice) == [(mine.id, "delete", "user", None, None, "forgotten at the user's request")]
    assert changes(journal, bob) == []


async def test_an_import_applies_its_updates_additions_and_deletions_with_the_file_named(
    companion: Companion, kb: ChromaKnowledgeBase, journal: Journal, clock: FakeClock, alice: Scope
) -> None:
    kept = kb.add(alice, "Alice likes tea", category="fact", source="user")
    dropped = kb.add(alice, "Alice once tried Vue", category="fact", source="user")
    added = MemoryRecord(
        id="mem_imported",
        scope=alice,
        content="Alice's birthday is 3 May",
        category="core",
        importance=3.0,
        created_at=clock.now(),
        last_access=clock.now(),
        source="user",
    )
    plan = ImportPlan(
        updates=[(kept, MemoryChange(content="Alice likes oolong tea"))], additions=[added], deletions=[dropped]
    )
    companion.editor.apply_import(alice, plan, source="MEMORY.md")

    assert sorted(record.content for record in kb.memories(alice)) == [
        "Alice likes oolong tea",
        "Alice's birthday is 3 May",
    ]
    assert changes(journal, alice) == [
        (kept.id, "edit", "operator", "Alice likes tea", "Alice likes oolong tea", "imported from MEMORY.md: text"),
        ("mem_imported", "add", "operator", None, "Alice's birthday is 3 May", "imported from MEMORY.md"),
        (dropped.id, "delete", "operator", None, None, "forgotten at the operator's request"),
    ]


async def test_an_edit_of_another_scopes_memory_writes_nothing_to_the_callers_change_log(
    companion: Companion, kb: ChromaKnowledgeBase, journal: Journal, alice: Scope, bob: Scope
) -> None:
    bobs = kb.add(bob, "Bob's PIN is 1234", category="fact", source="user")
    posing = replace(bobs, scope=alice)
    assert companion.editor.edit(posing, MemoryChange(content="leaked")) is None
    assert changes(journal, alice) == [] and changes(journal, bob) == []
