"""`companion memory …`: inspect, search, edit, forget, export and import one scope's memories."""

from __future__ import annotations

import asyncio
import bisect
import json
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bot.cli.ownership import confirm, edit_text
from bot.cli.profile import profile
from bot.cli.support import (
    changing_scope_options,
    cli_settings,
    jsonable,
    keep_backup,
    run_app,
    run_in_scope,
    scope_of,
    scope_options,
)
from knowledge.dates.moments import find_moment, is_all_day
from knowledge.dates.windows import TimeWindow
from knowledge.journal.user_settings import find_time_zone
from knowledge.memory.memory_file import (
    FILE_CATEGORIES,
    parse_memory_file,
    plan_import,
    render_json,
    render_markdown,
)
from knowledge.records import CLEAR, KEEP, Category, Clear, Keep, MemoryChange, MemoryRecord, Scope
from knowledge.rules.discretion import describe_origin

if TYPE_CHECKING:
    from bot.app import App

IMPORTANCE_BINS = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0)  # histogram edges; 0.5 is the decay-review line, 3.0 never decays


@click.group()
def memory() -> None:
    """Inspect and edit what the companion remembers, one (persona, user) scope at a time."""


memory.add_command(profile)


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2))


def _line(record: MemoryRecord) -> str:
    return f"{record.id}  {record.category:<7} {record.importance:5.2f}  [{describe_origin(record)}]  {record.content}"


def _local_moment(app: App, scope: Scope, text: str, *, whole_day_ends: bool = False) -> datetime:
    """A moment typed on the command line, read in the user's time zone: "2026-11-30", "2026-11-30 10:00",
    "yesterday", "last Monday", "next Friday 9am". With `whole_day_ends`, a day alone means its end."""
    now = app.clock.now().astimezone(app.user_settings.time_zone(scope))
    moment = find_moment(text, now)
    if moment is None:
        raise click.BadParameter(f"{text!r} is not a date or time I can read (try 2026-11-30 or '2026-11-30 10:00')")
    return moment + timedelta(days=1) if whole_day_ends and is_all_day(moment) else moment


def _between(app: App, scope: Scope, since: str | None, until: str | None) -> TimeWindow | None:
    """`--since/--until` as a window of the user's time (`--until` a day: that day included); None if neither."""
    if since is None and until is None:
        return None
    start = _local_moment(app, scope, since) if since else datetime.min.replace(tzinfo=UTC)
    end = _local_moment(app, scope, until, whole_day_ends=True) if until else datetime.max.replace(tzinfo=UTC)
    return TimeWindow(start, end, f"{since or ''}..{until or ''}")


def _one(app: App, scope: Scope, memory_id: str) -> MemoryRecord:
    found = app.knowledge.get(scope, [memory_id])
    if not found:
        raise click.ClickException(f"{scope} has no memory {memory_id}")
    return found[0]


@memory.command("list")
@scope_options
@click.option("--category", type=click.Choice(FILE_CATEGORIES), help="Only this category.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON with every field.")
@click.pass_context
def memory_list(
    ctx: click.Context, persona_id: str | None, user_name: str, category: str | None, as_json: bool
) -> None:
    """List the memories of one scope, most important first."""

    async def show(app: App, scope: Scope) -> None:
        records = await app.companion.memories(scope)
        records = [record for record in records if category in (None, record.category)]
        if as_json:
            _echo_json([record.to_dict() for record in records])
            return
        if not records:
            click.echo(f"No memories for {scope}.")
        for record in records:
            click.echo(_line(record))

    run_in_scope(ctx, persona_id, user_name, show)


@memory.command("search")
@scope_options
@click.argument("query")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 100))
@click.option("--history", "with_history", is_flag=True, help="Search the past messages of the scope too.")
@click.option("--since", help="Only what is from this moment on, in the user's time zone (2026-11-01, 'last Monday').")
@click.option("--until", "until", help="Only what is from before this moment (a date alone: to its end).")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON, with the relevance (fused) and similarity (meaning) of each hit.",
)
@click.pass_context
def memory_search(
    ctx: click.Context,
    persona_id: str | None,
    user_name: str,
    query: str,
    limit: int,
    with_history: bool,
    since: str | None,
    until: str | None,
    as_json: bool,
) -> None:
    """Find the memories a message like QUERY would recall, best first (and with --history, past messages).

    --since/--until keep to a stretch of time: an episode by when its conversation took place, a fact by
    when it was learned or changed or the day it is about, a past message by when it was said."""

    async def show(app: App, scope: Scope) -> None:
        during = _between(app, scope, since, until)
        hits = await app.companion.search_memories(scope, query, limit=limit, during=during)
        messages = []
        if with_history:
            await asyncio.to_thread(app.history.index_pending)  # messages stored since the bot last ran
            messages = (await app.companion.search(scope, query, limit=limit, during=during)).messages
        if as_json:
            found = [
                {**hit.record.to_dict(), "relevance": round(hit.relevance, 4), "similarity": round(hit.similarity, 4)}
                for hit in hits
            ]
            found += [
                {
                    **jsonable(asdict(hit.message)),
                    "category": "message",
                    "relevance": round(hit.relevance, 4),
                    "similarity": round(hit.similarity, 4),
                }
                for hit in messages
            ]
            _echo_json(found)
            return
        if not hits and not messages:
            click.echo(f"Nothing in {scope} matches.")
        for hit in hits:
            click.echo(f"{hit.relevance:4.2f}  {_line(hit.record)}")
        for said in messages:
            message = said.message
            click.echo(
                f"{said.relevance:4.2f}  [{message.sent_at:%Y-%m-%d %H:%M}] {message.speaker_name}: {message.content}"
            )

    run_in_scope(ctx, persona_id, user_name, show)


@memory.command("show")
@scope_options
@click.argument("memory_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def memory_show(ctx: click.Context, persona_id: str | None, user_name: str, memory_id: str, as_json: bool) -> None:
    """Show one memory with every field and its history."""

    async def show(app: App, scope: Scope) -> None:
        record = _one(app, scope, memory_id)
        history = app.journal.changes.changes(scope, memory_id)
        if as_json:
            _echo_json({**record.to_dict(), "history": [jsonable(asdict(entry)) for entry in history]})
            return
        for key, value in record.to_dict().items():
            click.echo(f"{key:>16}: {value}")
        for entry in history:
            click.echo(f"{entry.at:%Y-%m-%d %H:%M}  {entry.action} by {entry.actor}: {entry.detail}")

    run_in_scope(ctx, persona_id, user_name, show)


@memory.command("edit")
@changing_scope_options
@click.argument("memory_id")
@click.option("--text", help="New text (without --text, --importance, --category or --shared: opens $EDITOR).")
@click.option("--importance", type=click.FloatRange(0, 1000), help="New importance, counted from now.")
@click.option("--category", type=click.Choice(FILE_CATEGORIES), help="New category.")
@click.option(
    "--shared",
    type=click.Choice(["yes", "no"]),
    help="yes: it may come up in every group chat; no: only in private and in the group it was learned in.",
)
@click.option("--about", help="The moment a plan or event is at, in the user's time zone ('2026-11-30 10:00'); none.")
@click.option("--until", "until", help="When a state ends, in the user's time zone ('2026-12-04'); none: no end.")
@click.pass_context
def memory_edit(
    ctx: click.Context,
    persona_id: str,
    user_name: str,
    memory_id: str,
    text: str | None,
    importance: float | None,
    category: Category | None,
    shared: str | None,
    about: str | None,
    until: str | None,
) -> None:
    """Change a memory's text, importance, category, sharing or dates; the old version goes to its history."""

    async def edit(app: App, scope: Scope) -> None:
        record = _one(app, scope, memory_id)
        new_text = text
        if (text, importance, category, shared, about, until) == (None, None, None, None, None, None):
            edited = edit_text(record.content, param="text")
            if edited is None or edited.strip() == record.content:
                click.echo("Nothing changed.")
                return
            new_text = edited.strip()
        if new_text is not None and not new_text.strip():
            raise click.ClickException("a memory needs some text; to delete it use `companion memory forget`")
        change = MemoryChange(
            content=KEEP if new_text is None else new_text,
            category=KEEP if category is None else category,
            importance=KEEP if importance is None else importance,
            shared=KEEP if shared is None else shared == "yes",
            about=_date_change(app, scope, about),
            until=_date_change(app, scope, until),
        )
        updated = await asyncio.to_thread(app.editor.edit, record, change)
        assert updated is not None  # `_one` found it in this scope
        click.echo(_line(updated))

    run_in_scope(ctx, persona_id, user_name, edit)


def _date_change(app: App, scope: Scope, text: str | None) -> datetime | Clear | Keep:
    """A date given to `memory edit`: none given leaves it, "none" takes it away, anything else is read as a moment."""
    if text is None:
        return KEEP
    return CLEAR if text.strip().lower() == "none" else _local_moment(app, scope, text).astimezone(UTC)


@memory.command("forget")
@changing_scope_options
@click.argument("memory_ids", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Everything of this scope: memories, messages, history.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def memory_forget(
    ctx: click.Context, persona_id: str, user_name: str, memory_ids: tuple[str, ...], everything: bool, yes: bool
) -> None:
    """Delete memories by id, or with --all everything of the scope, as the user's /forget does."""
    if everything == bool(memory_ids):
        raise click.UsageError("give memory ids, or --all (not both)")

    async def forget(app: App, scope: Scope) -> None:
        if everything:
            if not yes:
                confirm(f"Forget every memory, message and history row of {scope}?", param="yes")
            report = await app.companion.forget_everything(scope)
        else:
            found = {record.id for record in app.knowledge.get(scope, memory_ids)}
            for missing in (memory_id for memory_id in memory_ids if memory_id not in found):
                click.echo(f"warning: {scope} has no memory {missing}", err=True)
            report = await app.forgetting.memories(scope, sorted(found), actor="operator")
        click.echo(
            f"Forgot {report.memories} memories, {report.messages} messages, {report.journal_rows} journal rows."
        )
        for path in report.files:
            click.echo(f"deleted {path}, a memory file holding what was forgotten")

    run_in_scope(ctx, persona_id, user_name, forget)


def _render(app: App, scope: Scope, records: list[MemoryRecord], as_json: bool) -> str:
    now = app.clock.now()
    zone = app.user_settings.chosen_time_zone(scope)
    profile = app.journal.profiles.get(scope)
    text = None if profile is None else profile.text
    if as_json:
        return render_json(records, scope, now=now, time_zone=zone, profile=text)
    archive_below = app.policy_for(scope.persona_id).decay_review_below
    return render_markdown(records, scope, now=now, archive_below=archive_below, time_zone=zone, profile=text)


@memory.command("export")
@scope_options
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="File to write (default: stdout)."
)
@click.option("--json", "as_json", is_flag=True, help="JSON with every field (default: MEMORY.md; also for *.json).")
@click.pass_context
def memory_export(
    ctx: click.Context, persona_id: str | None, user_name: str, output: Path | None, as_json: bool
) -> None:
    """Write a scope's memories as MEMORY.md (readable, editable) or JSON; an existing file is kept as .bak."""

    async def export(app: App, scope: Scope) -> None:
        records = await asyncio.to_thread(app.knowledge.memories, scope, categories=FILE_CATEGORIES)
        text = _render(app, scope, records, as_json or (output is not None and output.suffix == ".json"))
        if output is None:
            click.echo(text, nl=False)
            return
        if backup := keep_backup(output):
            click.echo(f"kept the previous file as {backup.name}", err=True)
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {len(records)} memories of {scope} to {output}", err=True)

    run_in_scope(ctx, persona_id, user_name, export)


@memory.command("import")
@changing_scope_options
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--replace", "replace_all", is_flag=True, help="Also delete the scope's memories the file leaves out.")
@click.option("--dry-run", is_flag=True, help="Only say what would change.")
@click.option("--from-other-scope", is_flag=True, help="Accept a file exported for another user or persona.")
@click.pass_context
def memory_import(
    ctx: click.Context,
    persona_id: str,
    user_name: str,
    file: Path,
    replace_all: bool,
    dry_run: bool,
    from_other_scope: bool,
) -> None:
    """Read a MEMORY.md or JSON export back into the scope named here.

    Edited text, category or importance is applied; blocks with an unknown id become new memories;
    a block that cannot be read is skipped with a warning, and a file of which none can be read is an
    error. Before anything changes, the scope's current memories are written to FILE.bak.
    """

    async def load(app: App, scope: Scope) -> None:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise click.ClickException(f"cannot read {file}: {error}") from error
        parsed = parse_memory_file(text, scope)
        if parsed.scope is not None and parsed.scope != scope and not from_other_scope:
            raise click.ClickException(
                f"{file.name} holds the memories of {parsed.scope}, not {scope}; "
                "to copy them into this scope as new memories, add --from-other-scope"
            )
        for warning in parsed.warnings:
            click.echo(f"warning: {file.name}: {warning}", err=True)
        if parsed.warnings and not parsed.entries:
            raise click.ClickException(f"nothing imported: {file.name} holds no memory that can be read")
        if replace_all and parsed.warnings:
            raise click.ClickException("with --replace every block must be readable: fix the blocks above first")
        stored = await asyncio.to_thread(app.knowledge.memories, scope, categories=FILE_CATEGORIES)
        now = app.clock.now()
        plan = plan_import(
            stored, parsed, scope, now=now, policy=app.policy_for(scope.persona_id), replace_all=replace_all
        )
        summary = (
            f"{len(plan.updates)} updated, {len(plan.additions)} added, {len(plan.deletions)} deleted, "
            f"{plan.unchanged} unchanged"
        )
        if not dry_run:
            _import_time_zone(app, scope, parsed.time_zone)
        if dry_run or not plan.changes:
            click.echo(f"{summary}{' (dry run: nothing changed)' if dry_run else ''}")
            return
        backup = file.with_name(file.name + ".bak")
        backup.write_text(_render(app, scope, stored, text.lstrip().startswith("{")), encoding="utf-8")
        await asyncio.to_thread(app.editor.apply_import, scope, plan, source=file.name)
        click.echo(f"{summary}; the memories as they were are in {backup.name}")

    run_in_scope(ctx, persona_id, user_name, load)


def _import_time_zone(app: App, scope: Scope, name: str | None) -> None:
    """The time zone a file names becomes the user's (it was their choice when it was exported)."""
    if name is None or name == app.user_settings.chosen_time_zone(scope):
        return
    zone = find_time_zone(name)
    if zone is None:
        click.echo(f"warning: the file names an unknown time zone {name!r}; the user's stays as it was", err=True)
        return
    app.user_settings.set_time_zone(scope, zone)
    click.echo(f"time zone set to {zone.key}")


@memory.command("stats")
@scope_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def memory_stats(ctx: click.Context, persona_id: str | None, user_name: str, as_json: bool) -> None:
    """Counts by category, an importance histogram, dead letters, tokens spent per role, and the user's tokens
    today against their daily quota."""

    async def show(app: App, scope: Scope) -> None:
        records = await app.companion.memories(scope)
        spent, daily_tokens = await app.companion.tokens_today(scope)
        stats = {
            "scope": str(scope),
            "memories": len(records),
            "by_category": dict(Counter(record.category for record in records)),
            "importance": _histogram(records),
            "dead_letters": len(app.journal.jobs.dead_letters(scope)),
            "backlog_all_scopes": app.backlog_alarm.report(app.journal.jobs.backlog(), app.clock.now()),
            "time_zone": app.user_settings.time_zone(scope).key,
            "time_zone_chosen": app.user_settings.chosen_time_zone(scope) is not None,
            "tokens_today": spent,
            "daily_tokens": daily_tokens,
            "token_usage_all_scopes": [asdict(usage) for usage in app.journal.usage.totals()],
        }
        if as_json:
            _echo_json(stats)
        else:
            _print_stats(stats)

    run_in_scope(ctx, persona_id, user_name, show)


def _histogram(records: list[MemoryRecord]) -> list[dict[str, Any]]:
    counts = Counter(bisect.bisect_right(IMPORTANCE_BINS, record.importance) for record in records)
    edges = (0.0, *IMPORTANCE_BINS, None)
    return [{"from": edges[index], "to": edges[index + 1], "count": counts[index]} for index in range(len(edges) - 1)]


def _print_stats(stats: dict[str, Any]) -> None:
    categories = ", ".join(f"{name} {count}" for name, count in sorted(stats["by_category"].items())) or "none"
    click.echo(f"{stats['scope']}: {stats['memories']} memories ({categories})")
    click.echo("importance:")
    widest = max((row["count"] for row in stats["importance"]), default=0) or 1
    for row in stats["importance"]:
        label = f"{row['from']:.1f}+" if row["to"] is None else f"{row['from']:.1f}-{row['to']:.1f}"
        click.echo(f"  {label:>8} {row['count']:5d} {'#' * round(30 * row['count'] / widest)}")
    click.echo(f"dead letters: {stats['dead_letters']}")
    backlog = stats["backlog_all_scopes"]
    click.echo(
        f"background jobs waiting (all scopes): {backlog['pending']}, the oldest for "
        f"{backlog['oldest_waiting_seconds'] / 60:.1f} min (a warning is logged past "
        f"{backlog['warning_past_seconds'] / 60:g} min)"
    )
    chosen = "chosen with /timezone" if stats["time_zone_chosen"] else "the default"
    click.echo(f"time zone: {stats['time_zone']} ({chosen})")
    quota = "no daily quota" if stats["daily_tokens"] is None else f"of {stats['daily_tokens']:,} a day"
    click.echo(f"tokens of replies today: {stats['tokens_today']:,} ({quota})")
    click.echo("tokens spent per role (all scopes): role, model, calls, prompt + completion tokens")
    if not stats["token_usage_all_scopes"]:
        click.echo("  none recorded yet")
    for usage in stats["token_usage_all_scopes"]:
        click.echo(
            f"  {usage['role']:<10} {usage['model']:<24} {usage['calls']:6d} "
            f"{usage['prompt_tokens']:>10,} + {usage['completion_tokens']:,}"
        )


@memory.command("history")
@scope_options
@click.option("--id", "memory_id", help="Only the changes of this memory.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def memory_history(
    ctx: click.Context, persona_id: str | None, user_name: str, memory_id: str | None, as_json: bool
) -> None:
    """Show how a scope's memories changed (old -> new, who, when)."""

    async def show(app: App, scope: Scope) -> None:
        entries = app.journal.changes.changes(scope, memory_id)
        if as_json:
            _echo_json([jsonable(asdict(entry)) for entry in entries])
            return
        if not entries:
            click.echo(f"No history for {scope}.")
        for entry in entries:
            change = f"{entry.old_content!r} -> {entry.new_content!r}"
            click.echo(f"{entry.at:%Y-%m-%d %H:%M}  {entry.memory_id}  {entry.action:<7} by {entry.actor}: {change}")

    run_in_scope(ctx, persona_id, user_name, show)


@memory.command("dead-letters")
@click.option("--persona", "persona_id", help="With --user: this persona (default: COMPANION_DEFAULT_PERSONA).")
@click.option("--user", "user_name", help="Only this user.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def memory_dead_letters(ctx: click.Context, persona_id: str | None, user_name: str | None, as_json: bool) -> None:
    """List background work that failed for good (unreadable monitor output, jobs out of retries)."""
    if persona_id is not None and user_name is None:
        raise click.UsageError("--persona needs --user; give neither for every scope")

    async def show(app: App) -> None:
        scope = scope_of(app, persona_id, user_name) if user_name else None
        letters = app.journal.jobs.dead_letters(scope)
        if as_json:
            _echo_json([{**jsonable(asdict(letter)), "scope": str(letter.scope)} for letter in letters])
            return
        if not letters:
            click.echo("No dead letters.")
        for letter in letters:
            click.echo(f"{letter.at:%Y-%m-%d %H:%M}  {letter.id}  {letter.kind:<9} {letter.scope}: {letter.error}")

    run_app(cli_settings(ctx), show)
