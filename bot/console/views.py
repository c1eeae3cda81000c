"""What the console shows and changes, as JSON-ready values the pages and the API share.

Reads go through the Companion facade and the services the command line uses (`bot/cli/memory.py`); edits
and forgets through the same `MemoryEditor` and `Forgetting`, logged with the actor `console`.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from core.forgetting import ForgetReport
from knowledge.conversations.message_log import ScopeActivity
from knowledge.forget.privacy_scan import scan_directory
from knowledge.memory.memory_file import FILE_CATEGORIES
from knowledge.records import KEEP, Category, MemoryChange, MemoryRecord, Scope, StoredMessage

if TYPE_CHECKING:
    from bot.app import App

ACTOR = "console"
MAX_SCOPES = 200  # the most recently active; a search finds the others
MAX_IMPORTANCE = 1000.0


class BadEdit(ValueError):
    """An edit the console refuses, with the reason shown to the operator."""


LISTED: tuple[Category, ...] = ("core", "fact", "episode", "chapter")  # what the memories page lists


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


async def scopes(app: App, matching: str = "") -> list[dict[str, Any]]:
    """The users (scopes) with messages, the `MAX_SCOPES` most recently active first, with their message counts.

    Their memories are counted on each user's page: chromadb counts a scope's memories only by reading them,
    which for a whole list costs seconds (bench.console)."""

    def listed() -> list[tuple[ScopeActivity, list[str]]]:
        rows = app.working_memory.log.scopes(matching.strip(), limit=MAX_SCOPES)
        return [(row, _identities(app, row.scope)) for row in rows]

    return [
        {
            "persona_id": row.scope.persona_id,
            "user_id": row.scope.user_id,
            "identities": linked,
            "user_name": row.user_name,
            "messages": row.messages,
            "last_active": row.last_at.isoformat(),
        }
        for row, linked in await asyncio.to_thread(listed)  # one hop off the loop for the whole list
    ]


async def identities(app: App, scope: Scope) -> list[str]:
    """The platform identities whose memory `scope` is: a linked person's every one (`/link`), else the one."""
    return await asyncio.to_thread(_identities, app, scope)


def _identities(app: App, scope: Scope) -> list[str]:
    return [str(identity) for identity in app.companion.members(scope)]


async def portrait(app: App, scope: Scope) -> dict[str, Any]:
    """The user's profile (None until one is written) and the ongoing threads of their life, newest news first."""
    profile = await asyncio.to_thread(app.journal.profiles.get, scope)
    threads = await asyncio.to_thread(app.journal.threads.active, scope)
    return {
        "profile": None
        if profile is None
        else {"text": profile.text, "author": profile.author, "written_at": profile.written_at.isoformat()},
        "threads": [
            {"title": thread.title, "news": thread.news, "since": thread.since.isoformat()[:10]} for thread in threads
        ],
    }


async def memories(app: App, scope: Scope) -> list[dict[str, Any]]:
    """A scope's memories, most important first, as `companion memory list --json` prints them, each with
    its history (oldest change first)."""
    records = await asyncio.to_thread(app.knowledge.memories, scope, categories=LISTED)
    history: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in await asyncio.to_thread(app.journal.changes.changes, scope):
        history[entry.memory_id].append({**asdict(entry), "at": entry.at.isoformat()})
    return [{**record.to_dict(), "history": history[record.id]} for record in records]


async def replies(app: App, scope: Scope, *, limit: int = 20) -> list[dict[str, Any]]:
    """A scope's latest replies, newest first, each with its trace: the memories and earlier messages that were in
    its prompt (ids and text, read now in the same scope), the recall tool's calls, model, tokens and timings."""
    found = await asyncio.to_thread(app.why.recent, scope, limit=limit)
    return [
        {
            **{key: value for key, value in asdict(explained.trace).items() if key != "scope"},
            "at": explained.trace.at.isoformat(),
            "exchange": [_message(said) for said in explained.exchange],
            "memories": [
                {"id": record.id, "category": record.category, "content": record.content}
                for record in explained.memories
            ],
            "messages": [_message(said) for said in explained.messages],
            "gone": explained.gone,
        }
        for explained in found
    ]


def _message(said: StoredMessage) -> dict[str, Any]:
    return {
        "id": said.id,
        "role": said.role,
        "speaker_name": said.speaker_name,
        "sent_at": said.sent_at.isoformat(),
        "content": said.content,
    }


async def usage(app: App, *, days: int = 7) -> list[dict[str, Any]]:
    """Replies and tokens per day (UTC), user and model over the last `days`, with their cost where the model's
    prices are configured (`[usage] prices`)."""
    since = app.clock.now() - timedelta(days=days)
    rows = await asyncio.to_thread(app.journal.traces.usage, since)
    prices = app.settings.usage.prices
    return [
        {
            "day": row.day,
            "persona_id": row.scope.persona_id,
            "user_id": row.scope.user_id,
            "model": row.model,
            "replies": row.replies,
            "prompt_tokens": row.prompt_tokens,
            "completion_tokens": row.completion_tokens,
            "cost": _cost(prices.get(row.model), row.prompt_tokens, row.completion_tokens),
        }
        for row in rows
    ]


def _cost(price: tuple[float, float] | None, prompt_tokens: int, completion_tokens: int) -> float | None:
    """What the tokens cost at a model's price per million prompt and reply tokens; None without a price."""
    if price is None:
        return None
    return round((prompt_tokens * price[0] + completion_tokens * price[1]) / 1_000_000, 6)


async def quota(app: App, scope: Scope) -> dict[str, int | None]:
    """The tokens the user's replies took today, and their daily quota (None: no limit)."""
    spent, limit = await app.companion.tokens_today(scope)
    return {"tokens_today": spent, "daily_tokens": limit}


async def work(app: App, *, days: int = 7) -> dict[str, Any]:
    """The background's state: its backlog, pending jobs per user, dead letters (oldest first), and check-ins
    planned, and done in the last `days`."""
    backlog = await asyncio.to_thread(app.journal.jobs.backlog)
    pending = await asyncio.to_thread(app.journal.jobs.scopes_with_work)
    letters = await asyncio.to_thread(app.journal.jobs.dead_letters)
    checkins = await asyncio.to_thread(app.journal.checkins.listing, since=app.clock.now() - timedelta(days=days))
    return {
        "backlog": app.backlog_alarm.report(backlog, app.clock.now()),
        "pending": [
            {"persona_id": scope.persona_id, "user_id": scope.user_id, "jobs": count}
            for scope, count in pending.items()
        ],
        "dead_letters": [
            {
                "id": letter.id,
                "kind": letter.kind,
                "persona_id": letter.scope.persona_id,
                "user_id": letter.scope.user_id,
                "error": letter.error,
                "at": letter.at.isoformat(),
                "payload": letter.payload,
            }
            for letter in letters
        ],
        "checkins": [checkin.to_dict() for checkin in checkins],
    }


async def retry(app: App, letter_id: str) -> bool:
    """Run a dead letter's work again as a fresh job; False if it is gone or is not work that can be rerun."""
    return app.tasks.retry(letter_id) is not None  # on the loop: it schedules the job


async def discard(app: App, letter_id: str) -> bool:
    """Drop a dead letter; False if it was not kept."""
    return await asyncio.to_thread(app.journal.jobs.discard, letter_id)


async def privacy_check(app: App, text: str) -> dict[str, Any]:
    """What `companion privacy-check` reports: every file of the data directory scanned (raw bytes and live SQLite
    rows) for `text`, and where it still is. In server mode the shared servers keep their data elsewhere."""
    if not text.strip():
        raise BadEdit("give the text to look for")
    data_dir = app.settings.storage.data_dir
    report = await asyncio.to_thread(scan_directory, data_dir, text)
    return {
        "scanned": len(report.scanned),
        "in_files": {str(path.relative_to(data_dir)): count for path, count in report.in_files.items()},
        "in_rows": report.in_rows,
        "unreadable": report.unreadable,
        "clean": report.clean,
        "server_mode": app.storage.server_mode,
    }


def _one(app: App, scope: Scope, memory_id: str) -> MemoryRecord | None:
    found = app.knowledge.get(scope, [memory_id])
    return found[0] if found else None


def read_change(fields: Mapping[str, Any]) -> MemoryChange:
    """An edit as the API or a form gives it: `content`, `category`, `importance`, `shared`; absent ones stay."""
    content, category, importance, shared = (
        fields.get(name) for name in ("content", "category", "importance", "shared")
    )
    if content is not None and (not isinstance(content, str) or not content.strip()):
        raise BadEdit("a memory needs some text; to delete it, forget it")
    if category is not None and category not in FILE_CATEGORIES:
        raise BadEdit(f"category must be one of {', '.join(FILE_CATEGORIES)}")
    if importance is not None:
        try:
            importance = float(importance)
        except (TypeError, ValueError):
            raise BadEdit("importance must be a number") from None
        if not 0 <= importance <= MAX_IMPORTANCE:
            raise BadEdit(f"importance must be between 0 and {MAX_IMPORTANCE:g}")
    if shared is not None and not isinstance(shared, bool):
        shared = str(shared).lower() in ("yes", "true", "on", "1")
    return MemoryChange(
        content=KEEP if content is None else content.strip(),
        category=KEEP if category is None else category,
        importance=KEEP if importance is None else importance,
        shared=KEEP if shared is None else shared,
    )


async def edit(app: App, scope: Scope, memory_id: str, change: MemoryChange) -> dict[str, Any] | None:
    """Apply `change` to one memory of `scope`; the old version goes to its history. None if it has no such memory."""
    record = await asyncio.to_thread(_one, app, scope, memory_id)
    if record is None:
        return None
    updated = await asyncio.to_thread(app.editor.edit, record, change, actor=ACTOR)
    return None if updated is None else updated.to_dict()


async def forget_memory(app: App, scope: Scope, memory_id: str) -> ForgetReport | None:
    """Forget one memory of `scope`, what quotes it and the messages it came from; None if it has no such memory."""
    if await asyncio.to_thread(_one, app, scope, memory_id) is None:
        return None
    return await app.forgetting.memories(scope, [memory_id], actor=ACTOR)


async def forget_user(app: App, scope: Scope) -> ForgetReport:
    """Forget everything of `scope`, as the user's own `/forget` does."""
    return await app.companion.forget_everything(scope)


def report(forgot: ForgetReport) -> dict[str, int]:
    """What a forget deleted, as counts."""
    return {"memories": forgot.memories, "messages": forgot.messages, "journal_rows": forgot.journal_rows}
