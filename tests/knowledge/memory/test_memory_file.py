"""MEMORY.md and JSON memory files: the format, fault-tolerant reading, and what an import changes.

The format: docs/development/design-rules.md#the-memory-file.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from knowledge.memory.memory_file import parse_memory_file, plan_import, render_json, render_markdown
from knowledge.records import CLEAR, MemoryChange, MemoryRecord, Scope
from knowledge.rules.decay import MemoryPolicy

NOW = datetime(2026, 2, 20, 18, 3, tzinfo=UTC)
ALICE, BOB = Scope("xiaoxiang", "cli:alice"), Scope("xiaoxiang", "cli:bob")
POLICY = MemoryPolicy()


def record(memory_id: str, content: str, importance: float, category: str = "fact", **fields: object) -> MemoryRecord:
    fields.setdefault("last_access", NOW - timedelta(days=1))
    return MemoryRecord(
        id=memory_id,
        scope=ALICE,
        content=content,
        category=category,
        importance=importance,  # type: ignore[arg-type]
        created_at=NOW - timedelta(days=3),
        source="user",
        **fields,  # type: ignore[arg-type]
    )


RECORDS = [
    record("mem_low", "Alice once tried Vue", 0.42),
    record("mem_core", "Alice's birthday is 3 May", 3.0, "core", hits=12),
    record("mem_ramen", "Alice loves ramen\n#food is her favourite topic", 1.3, hits=4),
    record("mem_ep", "[2026-02-19 20:00] talked about the interview", 0.9, "episode"),
]


def markdown() -> str:
    return render_markdown(RECORDS, ALICE, now=NOW, archive_below=0.5)


def test_markdown_has_the_documented_format_sorted_by_importance_in_two_sections() -> None:
    text = markdown()
    active, archived = text.split("## Archived Memories")
    headers = [line for line in active.splitlines() if line.startswith("### ")]
    assert headers == [
        "### [mem_core] core | 3.00 | 2026-02-19 18:03 | 12 | private",
        "### [mem_ramen] fact | 1.30 | 2026-02-19 18:03 | 4 | private",
        "### [mem_ep] episode | 0.90 | 2026-02-19 18:03 | 0 | private",
    ]
    assert "### [mem_low] fact | 0.42 | 2026-02-19 18:03 | 0 | private\nAlice once tried Vue" in archived
    assert "<!-- persona: xiaoxiang -->" in text and "<!-- user: cli:alice -->" in text


def test_markdown_reads_back_what_it_wrote() -> None:
    parsed = parse_memory_file(markdown(), ALICE)
    assert (parsed.scope, parsed.exported_at, parsed.warnings) == (ALICE, NOW, [])
    by_id = {entry.id: entry for entry in parsed.entries}
    assert by_id["mem_ramen"].content == "Alice loves ramen\n#food is her favourite topic"
    assert (by_id["mem_core"].category, by_id["mem_core"].importance, by_id["mem_core"].hits) == ("core", 3.0, 12)
    assert plan_import(RECORDS, parsed, ALICE, now=NOW, policy=POLICY).unchanged == len(RECORDS)


def test_a_broken_block_is_skipped_with_a_warning_and_the_rest_loads() -> None:
    text = markdown().replace("fact | 1.30 |", "fact | lots |").replace("| 0.90 |", "| 0.90 | extra | more |")
    text += "\n### [new] secret | 1.0 | 2026-02-20 | 0\nshould not load\n\n### [new2] fact | 1.0 | 2026-02-20 | 0\n"
    parsed = parse_memory_file(text, ALICE)
    assert [entry.id for entry in parsed.entries] == ["mem_core", "mem_low"]
    assert len(parsed.warnings) == 4
    assert "importance 'lots' is not a number" in parsed.warnings[0] and parsed.warnings[0].startswith("line ")
    assert "expected 5" in parsed.warnings[1]
    assert "unknown category 'secret'" in parsed.warnings[2] and "no text" in parsed.warnings[3]


def test_edits_become_updates_and_unknown_ids_new_memories_in_the_target_scope() -> None:
    text = (
        markdown()
        .replace("Alice loves ramen", "Alice loves udon")
        .replace("fact | 0.42 |", "core | 0.42 |")
        .replace("episode | 0.90", "episode | 2.00")
        + "\n### [new] fact | 1.5 | 2026-02-20 | 0\nAlice has a cat called Mochi\n"
        + "\n### [new] fact | 1.5 | 2026-02-20 | 0\nAlice has a cat called Mochi\n"  # pasted twice: added once
        + "\n### [mem_of_bob] fact | 1.0 | 2026-02-20 | 0\nBob's id, imported into Alice's scope\n"
    )
    plan = plan_import(RECORDS, parse_memory_file(text, ALICE), ALICE, now=NOW, policy=POLICY)
    changes = {record.id: change for record, change in plan.updates}
    assert changes == {
        "mem_ramen": MemoryChange(content="Alice loves udon\n#food is her favourite topic"),
        "mem_low": MemoryChange(category="core"),
        "mem_ep": MemoryChange(importance=2.0),
    }
    assert [(added.content, added.scope, added.last_access) for added in plan.additions] == [
        ("Alice has a cat called Mochi", ALICE, NOW),
        ("Bob's id, imported into Alice's scope", ALICE, NOW),
    ]
    assert all(added.id.startswith("mem_") and added.id not in ("new", "mem_of_bob") for added in plan.additions)
    assert plan.unchanged == 2 and plan.deletions == []


def test_removed_blocks_are_deleted_only_with_replace() -> None:
    text = markdown().replace("### [mem_low] fact | 0.42 | 2026-02-19 18:03 | 0 | private\nAlice once tried Vue", "")
    parsed = parse_memory_file(text, ALICE)
    assert plan_import(RECORDS, parsed, ALICE, now=NOW, policy=POLICY).deletions == []
    assert [r.id for r in plan_import(RECORDS, parsed, ALICE, now=NOW, policy=POLICY, replace_all=True).deletions] == [
        "mem_low"
    ]


def test_decay_since_the_export_is_not_an_edit() -> None:
    old = [record("mem_old", "Alice likes tea", 1.0, last_access=NOW - timedelta(days=6))]
    exported = render_markdown(old, ALICE, now=NOW, archive_below=0.5)
    later = NOW + timedelta(days=5)  # four decay days have passed since the last access
    current = [replace(old[0], importance=0.95**4)]  # as the store reads it now; the file still says 1.00
    assert plan_import(current, parse_memory_file(exported, ALICE), ALICE, now=later, policy=POLICY).unchanged == 1


def test_json_restores_every_field_under_a_fresh_id() -> None:
    original = replace(
        RECORDS[1],
        verified=True,
        topic="personal",
        conversation_id="telegram:chat:-1001",
        message_ids=("m1",),
        learned_in="telegram:chat:-1001",
        shared=True,
    )
    parsed = parse_memory_file(render_json([original], ALICE, now=NOW), BOB)
    assert parsed.scope == ALICE and parsed.warnings == []
    [restored] = plan_import([], parsed, BOB, now=NOW, policy=POLICY).additions
    assert restored.id != original.id
    assert replace(restored, id=original.id, scope=ALICE) == original


def test_broken_json_entries_are_skipped() -> None:
    text = render_json(RECORDS[:2], ALICE, now=NOW).replace('"category": "core"', '"category": "system"')
    parsed = parse_memory_file(text, ALICE)
    assert [entry.id for entry in parsed.entries] == ["mem_low"]
    assert "system memories live in the persona file" in parsed.warnings[0]
    assert parse_memory_file("{not json", ALICE).warnings[0].startswith("not valid JSON")


def test_a_file_that_holds_no_memories_says_so() -> None:
    for not_memories in ("[1, 2, 3]", '"ramen"', "just some notes\nabout Alice", "# Memories\n\n## Active Memories\n"):
        parsed = parse_memory_file(not_memories, ALICE)
        assert parsed.entries == [] and len(parsed.warnings) == 1 and "nothing loaded" in parsed.warnings[0]
    mixed = json.loads(render_json(RECORDS[:1], ALICE, now=NOW))
    mixed["memories"] += [2, "Alice loves ramen"]
    parsed = parse_memory_file(json.dumps(mixed), ALICE)
    assert [entry.id for entry in parsed.entries] == ["mem_low"]
    assert parsed.warnings == [
        "memory #2: skipped: 2 is not a memory object",
        'memory #3: skipped: "Alice loves ramen" is not a memory object',
    ]
    for empty_scope in (render_markdown([], ALICE, now=NOW, archive_below=0.5), render_json([], ALICE, now=NOW), " "):
        assert parse_memory_file(empty_scope, ALICE).warnings == []  # nothing to load, and nothing wrong


def test_a_stored_id_listed_twice_counts_once() -> None:
    text = markdown() + "\n### [mem_core] core | 1.00 | 2026-02-20 00:00 | 0\nsomething else\n"
    parsed = parse_memory_file(text, ALICE)
    plan = plan_import(RECORDS, parsed, ALICE, now=NOW, policy=POLICY)
    assert plan.updates == [] and plan.additions == [] and "[mem_core] appears twice" in parsed.warnings[0]


# -- discretion: where a memory was learned, and whether the user shared it --------------------------

GROUP = "telegram:chat:-1001"


def test_origin_and_sharing_are_written_and_read_back() -> None:
    records = [
        record("mem_group", "Alice sings in a choir", 1.0, learned_in=GROUP),
        record("mem_told", "Alice's sister is called Mei", 1.0, shared=True),
        record("mem_both", "Alice runs on Sundays", 1.0, learned_in=GROUP, shared=True),
    ]
    text = render_markdown(records, ALICE, now=NOW, archive_below=0.5)
    assert "### [mem_group] fact | 1.00 | 2026-02-19 18:03 | 0 | group telegram:chat:-1001\n" in text
    assert "### [mem_told] fact | 1.00 | 2026-02-19 18:03 | 0 | private, shared\n" in text
    assert "### [mem_both] fact | 1.00 | 2026-02-19 18:03 | 0 | group telegram:chat:-1001, shared\n" in text
    parsed = parse_memory_file(text, ALICE)
    assert parsed.warnings == []
    assert plan_import(records, parsed, ALICE, now=NOW, policy=POLICY).unchanged == 3
    # imported into an empty scope, each keeps where it was learned and whether it is shared
    added = plan_import([], parsed, BOB, now=NOW, policy=POLICY).additions
    assert {(memory.content, memory.learned_in, memory.shared) for memory in added} == {
        ("Alice sings in a choir", GROUP, False),
        ("Alice's sister is called Mei", None, True),
        ("Alice runs on Sundays", GROUP, True),
    }


def test_sharing_changed_in_the_file_is_an_update_and_the_origin_never_changes() -> None:
    stored = [record("mem_told", "Alice's sister is called Mei", 1.0)]
    text = render_markdown(stored, ALICE, now=NOW, archive_below=0.5).replace("| private", "| private, shared")
    [(told, change)] = plan_import(stored, parse_memory_file(text, ALICE), ALICE, now=NOW, policy=POLICY).updates
    assert (told.id, change) == ("mem_told", MemoryChange(shared=True))
    moved = text.replace("| private, shared", f"| group {GROUP}")
    assert plan_import(stored, parse_memory_file(moved, ALICE), ALICE, now=NOW, policy=POLICY).unchanged == 1


def test_a_file_written_before_origins_loads_unchanged_and_its_new_memories_are_private() -> None:
    old = (
        "# Memories: xiaoxiang/cli:alice\n\n## Active Memories\n\n"
        "### [mem_told] fact | 1.00 | 2026-02-19 18:03 | 0\nAlice's sister is called Mei\n\n"
        "### [new] fact | 1.50 | 2026-02-20 10:00 | 2\nAlice has a cat called Mochi\n"
    )
    parsed = parse_memory_file(old, ALICE)
    assert parsed.warnings == [] and [entry.shared for entry in parsed.entries] == [None, None]
    stored = [record("mem_told", "Alice's sister is called Mei", 1.0, shared=True)]
    plan = plan_import(stored, parsed, ALICE, now=NOW, policy=POLICY)
    assert plan.updates == [] and plan.unchanged == 1  # the file says nothing of sharing: the flag stays
    [added] = plan.additions
    assert (added.learned_in, added.shared) == (None, False)


def test_json_without_origins_reads_as_private_and_leaves_sharing_alone() -> None:
    text = (
        render_json([RECORDS[1]], ALICE, now=NOW)
        .replace('"learned_in": null,', "")
        .replace('"shared": false', '"x": 0')
    )
    parsed = parse_memory_file(text, ALICE)
    assert parsed.warnings == []
    [entry] = parsed.entries
    assert entry.shared is None and entry.record is not None and entry.record.learned_in is None
    stored = [replace(RECORDS[1], shared=True)]
    assert plan_import(stored, parsed, ALICE, now=NOW, policy=POLICY).updates == []


def test_an_unreadable_origin_skips_the_block_with_a_warning() -> None:
    text = markdown().replace("| 12 | private", "| 12 | everywhere").replace("| 4 | private", "| 4 | private, loud")
    parsed = parse_memory_file(text, ALICE)
    assert sorted(entry.id for entry in parsed.entries) == ["mem_ep", "mem_low"]
    assert "'everywhere' is neither 'private'" in parsed.warnings[0]
    assert "'loud' after the origin" in parsed.warnings[1]


MONDAY = datetime(2026, 2, 23, 2, 0, tzinfo=UTC)
FRIDAY = datetime(2026, 2, 27, tzinfo=UTC)


def test_dates_are_a_sixth_header_field_and_read_back() -> None:
    dated = [
        record("mem_plan", "Alice has an interview", 1.0, about=MONDAY),
        record("mem_trip", "Alice is on a trip", 1.0, until=FRIDAY),
        record("mem_ramen", "Alice loves ramen", 1.0),
    ]
    text = render_markdown(dated, ALICE, now=NOW, archive_below=0.5, time_zone="Asia/Shanghai")
    assert "<!-- time zone: Asia/Shanghai -->" in text
    assert "### [mem_plan] fact | 1.00 | 2026-02-19 18:03 | 0 | private | about 2026-02-23 02:00\n" in text
    assert "### [mem_trip] fact | 1.00 | 2026-02-19 18:03 | 0 | private | until 2026-02-27 00:00\n" in text
    assert "### [mem_ramen] fact | 1.00 | 2026-02-19 18:03 | 0 | private\n" in text  # none: five fields
    parsed = parse_memory_file(text, ALICE)
    assert parsed.warnings == [] and parsed.time_zone == "Asia/Shanghai"
    assert {entry.id: (entry.about, entry.until) for entry in parsed.entries} == {
        "mem_plan": (MONDAY, None),
        "mem_trip": (None, FRIDAY),
        "mem_ramen": (None, None),
    }
    assert plan_import(dated, parsed, ALICE, now=NOW, policy=POLICY).updates == []  # nothing edited


def test_dates_edited_in_the_file_are_updates_and_an_emptied_field_takes_them_away() -> None:
    stored = [record("mem_plan", "Alice has an interview", 1.0, about=MONDAY, until=FRIDAY)]
    text = render_markdown(stored, ALICE, now=NOW, archive_below=0.5)
    moved = text.replace("about 2026-02-23 02:00", "about 2026-02-24 09:30")
    [(_, change)] = plan_import(stored, parse_memory_file(moved, ALICE), ALICE, now=NOW, policy=POLICY).updates
    assert change == MemoryChange(about=datetime(2026, 2, 24, 9, 30, tzinfo=UTC))
    emptied = text.replace("| about 2026-02-23 02:00; until 2026-02-27 00:00", "| ")
    [(_, change)] = plan_import(stored, parse_memory_file(emptied, ALICE), ALICE, now=NOW, policy=POLICY).updates
    assert change == MemoryChange(about=CLEAR, until=CLEAR)
    broken = parse_memory_file(text.replace("about 2026", "when 2026"), ALICE)
    assert broken.entries == [] and "dates are 'about YYYY-MM-DD HH:MM'" in broken.warnings[0]


def test_a_file_written_before_dates_existed_changes_no_date() -> None:
    stored = [record("mem_plan", "Alice has an interview", 1.0, about=MONDAY)]
    five_fields = "### [mem_plan] fact | 1.00 | 2026-02-19 18:03 | 0 | private\nAlice has an interview\n"
    assert plan_import(stored, parse_memory_file(five_fields, ALICE), ALICE, now=NOW, policy=POLICY).updates == []
    document = json.loads(render_json(stored, ALICE, now=NOW))
    for key in ("about", "until", "replaced_by", "changed_at"):
        del document["memories"][0][key]
    parsed = parse_memory_file(json.dumps(document), ALICE)
    assert parsed.warnings == [] and parsed.entries[0].record is not None
    assert parsed.entries[0].record.about is None
    assert plan_import(stored, parsed, ALICE, now=NOW, policy=POLICY).updates == []


def test_json_restores_the_dates_and_the_time_zone() -> None:
    changed = record(
        "mem_old",
        "Alice lives in Beijing",
        1.0,
        until=FRIDAY,
        replaced_by="mem_new",
        changed_at=NOW - timedelta(days=2),
        about=MONDAY,
    )
    parsed = parse_memory_file(render_json([changed], ALICE, now=NOW, time_zone="Europe/Berlin"), ALICE)
    assert parsed.time_zone == "Europe/Berlin"
    [restored] = plan_import([], parsed, ALICE, now=NOW, policy=POLICY).additions
    assert replace(restored, id=changed.id) == changed
