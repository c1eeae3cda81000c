"""MEMORY.md and JSON memory files: what `companion memory export` writes and `import` reads back.

MEMORY.md is the human-readable file of docs/development/design-rules.md#the-memory-file, one `###` block
per memory,

    ### [mem_3f2a9c] fact | 1.30 | 2026-02-20 18:03 | 4 | private
    主人喜欢拉面

(id, category, importance, last access in UTC, hits, where it was learned: `private` or
`group <conversation id>`, followed by `, shared` when the user let it come up in every group, and for
a memory with dates a sixth field, `about 2026-11-30 10:00; until 2026-12-04 00:00`, in UTC), in an
Active and an Archived section (memories fading below the decay-review line), most important first.
Files written before origins existed have four fields; their memories read as learned in private.
The user's chosen time zone, if any, is a header comment (`<!-- time zone: Europe/Berlin -->`), and their
profile, if one is written, a `## Profile` section before the memories (an import leaves the profile as it is).
JSON holds every field of every record, so it restores memories exactly. Reading is fault-tolerant:
a broken block is skipped with a warning naming its line, and the rest loads. Nothing here touches the
store: `plan_import` only says what an import would change. Forgetting deletes the memory files of a scope that
the companion wrote into the data directory (exports and their `.bak` copies) where they hold what was forgotten
(`erase_memory_files`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from knowledge.forget.target import ForgetTarget
from knowledge.records import CLEAR, KEEP, Category, Clear, Keep, MemoryChange, MemoryRecord, Scope, new_memory_id
from knowledge.rules.decay import MemoryPolicy, current_importance
from knowledge.rules.discretion import describe_origin, parse_origin

FILE_CATEGORIES: tuple[Category, ...] = ("core", "fact", "episode")  # system memories live in the persona file
_HEADER = re.compile(r"^###\s*\[(?P<id>[^\]]*)\](?P<fields>.*)$")
_HEADING = re.compile(r"^#{1,6}\s")  # "#hashtag" in a memory's text is text
_COMMENT = re.compile(r"^<!--\s*(?P<key>[\w ]+):\s*(?P<value>.*?)\s*-->$")
_TIME_FORMAT = "%Y-%m-%d %H:%M"
_DATE_FIELDS = ("about", "until")
IMPORTANCE_DECIMALS = 2


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """One memory as a file holds it; from JSON also the whole record, to restore it exactly."""

    id: str
    content: str
    category: Category
    importance: float
    hits: int = 0
    last_access: datetime | None = None
    learned_in: str | None = None  # where it was learned: a group conversation, or None (private)
    shared: bool | None = None  # None: the file does not say (a file written before the flag existed)
    about: datetime | None = None  # the moment a plan or event refers to
    until: datetime | None = None  # when a state ends
    record: MemoryRecord | None = None
    dates_stated: bool = False  # the file says which dates the memory has (files before dates existed do not)


@dataclass(slots=True)
class MemoryFile:
    """What a memory file says: whose memories they were, when exported, the entries, and what was skipped."""

    scope: Scope | None
    exported_at: datetime | None
    entries: list[MemoryEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    time_zone: str | None = None  # the user's chosen zone, if the file names one


@dataclass(slots=True)
class ImportPlan:
    """What importing a file into one scope changes."""

    updates: list[tuple[MemoryRecord, MemoryChange]] = field(default_factory=list)  # a stored memory, its change
    additions: list[MemoryRecord] = field(default_factory=list)
    deletions: list[MemoryRecord] = field(default_factory=list)
    unchanged: int = 0

    @property
    def changes(self) -> int:
        return len(self.updates) + len(self.additions) + len(self.deletions)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _escaped(line: str) -> str:
    return "\\" + line if line.startswith(("#", "\\")) else line  # a content line must never look like a header


def _dates_field(record: MemoryRecord) -> str:
    """The sixth header field: "about 2026-11-30 10:00; until 2026-12-04 00:00" (UTC), or "" for a memory without."""
    named = [(name, getattr(record, name)) for name in _DATE_FIELDS]
    return "; ".join(f"{name} {_utc(moment):{_TIME_FORMAT}}" for name, moment in named if moment is not None)


def render_markdown(
    records: Sequence[MemoryRecord],
    scope: Scope,
    *,
    now: datetime,
    archive_below: float,
    time_zone: str | None = None,
    profile: str | None = None,
) -> str:
    """MEMORY.md for these records of `scope`: the user's `profile` first, if any, then Active and Archived
    sections, most important first; `time_zone`: the zone the user chose, exported with their memories."""
    ranked = sorted(records, key=lambda record: (-record.importance, record.created_at))
    lines = [
        f"# Memories: {scope}",
        "",
        f"<!-- persona: {scope.persona_id} -->",
        f"<!-- user: {scope.user_id} -->",
        *([f"<!-- time zone: {time_zone} -->"] if time_zone else []),
        f"<!-- exported: {now.isoformat()} -->",
        f"<!-- total entries: {len(records)} -->",
        "<!-- Edit a block's text, category (core, fact, episode), importance, sharing (', shared' after",
        "     the origin: it may come up in every group) or dates (a sixth field: 'about YYYY-MM-DD HH:MM;",
        "     until YYYY-MM-DD HH:MM', UTC), or add a block; then run `companion memory import`.",
        "     Removing a block deletes nothing unless you import with --replace. -->",
    ]
    if profile:
        lines += ["", "## Profile", "", *(_escaped(line) for line in profile.splitlines())]
    for title, archived in (("Active Memories", False), ("Archived Memories", True)):
        lines += ["", f"## {title}"]
        for record in ranked:
            if (record.importance < archive_below and record.category == "fact") == archived:
                lines += [
                    "",
                    (
                        f"### [{record.id}] {record.category} | {record.importance:.{IMPORTANCE_DECIMALS}f} | "
                        f"{_utc(record.last_access):{_TIME_FORMAT}} | {record.hits} | {describe_origin(record)}"
                        + (f" | {dates}" if (dates := _dates_field(record)) else "")
                    ),
                    *(_escaped(line) for line in record.content.splitlines()),
                ]
    return "\n".join(lines) + "\n"


def render_json(
    records: Sequence[MemoryRecord],
    scope: Scope,
    *,
    now: datetime,
    time_zone: str | None = None,
    profile: str | None = None,
) -> str:
    """Every field of these records of `scope`, as JSON, with the time zone the user chose and their profile."""
    document = {
        "persona_id": scope.persona_id,
        "user_id": scope.user_id,
        **({"time_zone": time_zone} if time_zone else {}),
        **({"profile": profile} if profile else {}),
        "exported_at": now.isoformat(),
        "memories": [record.to_dict() for record in records],
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def parse_memory_file(text: str, scope: Scope) -> MemoryFile:
    """Read MEMORY.md or JSON (told apart by content); entries that cannot be read become warnings, and so does
    a file that holds something else than memories.

    JSON entries are read as records of `scope`, whatever scope the file names.
    """
    if text.lstrip().startswith(("{", "[")):
        return _parse_json(text, scope)
    return _parse_markdown(text)


MAX_MEMORY_FILE_BYTES = 64 * 1024 * 1024  # an export of even a huge scope is far smaller
_NOT_MEMORY_FILES = (".sqlite3", ".sqlite3-wal", ".sqlite3-shm", ".sqlite3-journal", ".bin", ".pickle")


def erase_memory_files(directory: Path, scope: Scope, target: ForgetTarget | None) -> list[Path]:
    """Delete the memory files of `scope` under `directory` that hold `target` (None: all of them); returns them.

    Only files that read as an export of this scope go (MEMORY.md or JSON, `.bak` copies included);
    databases and vector files are never read here.
    """
    erased = []
    for path in sorted(directory.rglob("*")):
        if not path.is_file() or path.name.endswith(_NOT_MEMORY_FILES):
            continue
        if path.stat().st_size > MAX_MEMORY_FILE_BYTES:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if parse_memory_file(text, scope).scope != scope:
            continue
        if target is None or target.matches(text):
            path.unlink()
            erased.append(path)
    return erased


def _category(value: Any) -> Category:
    if value == "system":
        raise ValueError("system memories live in the persona file and cannot be imported")
    if value not in FILE_CATEGORIES:
        raise ValueError(f"unknown category {value!r} (use one of {', '.join(FILE_CATEGORIES)})")
    return cast(Category, value)


def _importance(value: Any) -> float:
    try:
        importance = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"importance {value!r} is not a number") from None
    if not 0 <= importance < 1000:  # also rejects NaN
        raise ValueError(f"importance {value} is out of range")
    return importance


def _hits(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"hits {value!r} is not a whole number") from None


def _time(value: Any) -> datetime:
    try:
        return _utc(datetime.fromisoformat(value))
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a date (YYYY-MM-DD HH:MM)") from None


def _parse_markdown(text: str) -> MemoryFile:
    meta: dict[str, str] = {}
    blocks: list[tuple[int, str, list[str]]] = []  # (line number, header, content lines)
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("###"):
            blocks.append((number, stripped, []))
        elif _HEADING.match(stripped):
            blocks.append((number, "", []))  # a section heading ends the block before it
        elif (match := _COMMENT.match(stripped)) and (not blocks or not blocks[-1][1]):  # not inside a memory
            meta[match["key"].strip().lower()] = match["value"]
        elif blocks:
            blocks[-1][2].append(line.removeprefix("\\"))
    parsed = MemoryFile(
        scope=_scope_of(meta.get("persona"), meta.get("user")),
        exported_at=_moment(meta.get("exported")),
        time_zone=meta.get("time zone") or None,
    )
    if text.strip() and parsed.scope is None and not any(header for _, header, _ in blocks):
        parsed.warnings.append("no memory blocks ('### [id] category | importance | …'); nothing loaded")
    for number, header, content in blocks:
        if not header:
            continue
        try:
            parsed.entries.append(_markdown_entry(header, "\n".join(content).strip()))
        except ValueError as error:
            parsed.warnings.append(f"line {number}: block skipped: {error}")
    return parsed


def _markdown_entry(header: str, content: str) -> MemoryEntry:
    match = _HEADER.match(header)
    if match is None:
        raise ValueError("the header must look like '### [id] category | importance | last access | hits'")
    fields = [part.strip() for part in match["fields"].split("|")]
    if len(fields) not in (4, 5, 6):
        raise ValueError(
            f"the header has {len(fields)} fields after the id; expected 5 "
            "(category | importance | last access | hits | origin), or 6 with dates"
        )
    category, importance, last_access, hits = fields[:4]
    # four fields: a file written before origins existed, whose memories read as learned in private
    learned, shared = parse_origin(fields[4]) if len(fields) >= 5 else (None, None)
    dates: dict[str, Any] = _parse_dates(fields[5]) if len(fields) == 6 else {}
    if not content:
        raise ValueError("the memory has no text")
    return MemoryEntry(
        id=match["id"].strip(),
        content=content,
        category=_category(category),
        importance=_importance(importance),
        hits=_hits(hits),
        last_access=_time(last_access),
        learned_in=learned,
        shared=shared,
        **dates,
        dates_stated=len(fields) == 6,
    )


def _parse_dates(text: str) -> dict[str, datetime]:
    """The sixth header field, "about 2026-11-30 10:00; until 2026-12-04 00:00", as `MemoryEntry` fields."""
    dates: dict[str, datetime] = {}
    for part in filter(None, (part.strip() for part in text.split(";"))):
        name, _, moment = part.partition(" ")
        if name not in _DATE_FIELDS or name in dates:
            raise ValueError(f"{part!r}: dates are 'about YYYY-MM-DD HH:MM' and/or 'until YYYY-MM-DD HH:MM'")
        dates[name] = _time(moment.strip())
    return dates


def _parse_json(text: str, scope: Scope) -> MemoryFile:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        return MemoryFile(None, None, warnings=[f"not valid JSON ({error}); nothing loaded"])
    if not isinstance(document, dict) or not isinstance(document.get("memories"), list):
        return MemoryFile(None, None, warnings=["expected an object with a 'memories' list; nothing loaded"])
    parsed = MemoryFile(
        scope=_scope_of(document.get("persona_id"), document.get("user_id")),
        exported_at=_moment(document.get("exported_at")),
        time_zone=str(document["time_zone"]) if document.get("time_zone") else None,
    )
    for index, item in enumerate(document["memories"]):
        if not isinstance(item, dict):
            parsed.warnings.append(f"memory #{index + 1}: skipped: {json.dumps(item)[:40]} is not a memory object")
            continue
        try:
            parsed.entries.append(_json_entry(item, scope))
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            parsed.warnings.append(f"memory #{index + 1}: skipped: {error!r}")
    return parsed


def _json_entry(item: dict[str, Any], scope: Scope) -> MemoryEntry:
    content = str(item["content"]).strip()
    if not content:
        raise ValueError("the memory has no text")
    record = MemoryRecord(
        id=str(item["id"]),
        scope=scope,
        content=content,
        category=_category(item["category"]),
        importance=_importance(item["importance"]),
        created_at=_time(item["created_at"]),
        last_access=_time(item["last_access"]),
        source=item.get("source") or "user",
        verified=bool(item.get("verified", False)),
        topic=item.get("topic"),
        conversation_id=item.get("conversation_id"),
        message_ids=tuple(item.get("message_ids") or ()),
        base_importance=_importance(item.get("base_importance", item["importance"])),
        decay_kept=bool(item.get("decay_kept", False)),
        hits=_hits(item.get("hits", 0)),
        learned_in=str(item["learned_in"]) if item.get("learned_in") else None,  # absent: private
        shared=bool(item.get("shared", False)),
        # absent in files written before memories had dates
        about=_optional_time(item.get("about")),
        until=_optional_time(item.get("until")),
        replaced_by=str(item["replaced_by"]) if item.get("replaced_by") else None,
        changed_at=_optional_time(item.get("changed_at")),
    )
    return MemoryEntry(
        record.id,
        content,
        record.category,
        record.importance,
        record.hits,
        record.last_access,
        record.learned_in,
        None if item.get("shared") is None else record.shared,  # None: the file does not say, the flag stays
        record.about,
        record.until,
        record,
        dates_stated=any(name in item for name in _DATE_FIELDS),
    )


def _optional_time(value: Any) -> datetime | None:
    return None if value in (None, "") else _time(value)


def _scope_of(persona_id: Any, user_id: Any) -> Scope | None:
    if isinstance(persona_id, str) and isinstance(user_id, str) and persona_id and user_id:
        return Scope(persona_id, user_id)
    return None


def _moment(value: Any) -> datetime | None:
    try:
        return _time(value)
    except ValueError:
        return None


def plan_import(
    stored: Iterable[MemoryRecord],
    memory_file: MemoryFile,
    scope: Scope,
    *,
    now: datetime,
    policy: MemoryPolicy,
    replace_all: bool = False,
) -> ImportPlan:
    """What importing `memory_file` into `scope` changes, given the scope's `stored` memories.

    An entry whose id the scope holds updates that memory where its text, category or importance
    was edited (importance is compared as of the export, so decay since then is no edit), or its
    sharing when the file says it; where a memory was learned is history and never changes. Any other
    entry becomes a new memory with a fresh id (ids never reach into another scope), unless the
    scope already holds its text: importing a file twice adds nothing twice. With `replace_all`,
    memories the file does not list are deleted.
    """
    plan = ImportPlan()
    by_id = {record.id: record for record in stored if record.scope == scope}
    known_texts = {_normalized(record.content) for record in by_id.values()}
    seen: set[str] = set()
    for entry in memory_file.entries:
        record = by_id.get(entry.id)
        if record is None and _normalized(entry.content) in known_texts:
            plan.unchanged += 1  # a new block imported before: not added twice
        elif record is None:
            plan.additions.append(_new_record(entry, scope, now))
            known_texts.add(_normalized(entry.content))
        elif entry.id in seen:
            memory_file.warnings.append(f"[{entry.id}] appears twice; the second block was skipped")
        elif change := _change_of(record, entry, memory_file.exported_at, policy):
            plan.updates.append((record, change))
        else:
            plan.unchanged += 1
        seen.add(entry.id)
    if replace_all:
        plan.deletions = [record for record in by_id.values() if record.id not in seen]
    return plan


def _change_of(
    record: MemoryRecord, entry: MemoryEntry, exported_at: datetime | None, policy: MemoryPolicy
) -> MemoryChange | None:
    """The change from `record` to `entry`, if any."""
    exported = record.importance if exported_at is None else current_importance(record, exported_at, policy)
    change = MemoryChange(
        content=entry.content if _normalized(record.content) != _normalized(entry.content) else KEEP,
        category=entry.category if entry.category != record.category else KEEP,
        importance=(
            entry.importance
            if round(exported, IMPORTANCE_DECIMALS) != round(entry.importance, IMPORTANCE_DECIMALS)
            else KEEP
        ),
        shared=entry.shared if entry.shared is not None and entry.shared != record.shared else KEEP,
        about=_date_change(record.about, entry.about, entry),
        until=_date_change(record.until, entry.until, entry),
    )
    return change if change.values() else None


def _date_change(old: datetime | None, new: datetime | None, entry: MemoryEntry) -> datetime | Clear | Keep:
    """A date an entry sets or takes away; a file written before dates existed changes none."""
    if not entry.dates_stated:
        return KEEP
    if new is not None and (old is None or _minute(old) != _minute(new)):
        return new
    if new is None and old is not None:
        return CLEAR  # taken out of the file
    return KEEP


def _minute(moment: datetime) -> datetime:
    return _utc(moment).replace(second=0, microsecond=0)


def _normalized(text: str) -> str:
    return " ".join(text.split())


def _new_record(entry: MemoryEntry, scope: Scope, now: datetime) -> MemoryRecord:
    if entry.record is not None:  # from JSON: exactly as it was, under a fresh id
        return replace(entry.record, id=new_memory_id(), scope=scope, review_pending=None)
    # From MEMORY.md, whose importance is as of the export: the memory starts there, now.
    return MemoryRecord(
        id=new_memory_id(),
        scope=scope,
        content=entry.content,
        category=entry.category,
        importance=entry.importance,
        created_at=now,
        last_access=now,
        source="user",
        hits=entry.hits,
        learned_in=entry.learned_in,
        shared=bool(entry.shared),
        about=entry.about,
        until=entry.until,
    )
