"""The `companion` command line."""

from __future__ import annotations

import asyncio
import getpass
import signal
from dataclasses import asdict
from datetime import datetime
import json
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from core.errors import CompanionError
from knowledge.records import Scope

from .app import EMBEDDED_MODEL_NOTICE, App, build_app
from .config import CONFIG_ENV, Settings, load_settings, settings_help
from .terminal import TerminalChat, stdin_reader

T = TypeVar("T")

EPILOG = f"""\b
Settings come from an optional TOML file (./companion.toml, or the file named by {CONFIG_ENV};
keys are the lower-case names without the COMPANION_ prefix) and from these environment
variables, which win. Secrets are read from the environment only.
{settings_help()}
"""


def _run(
    settings: Settings, work: Callable[[App], Coroutine[Any, Any, T]], *, start: bool = False, schedule: bool = False
) -> T:
    """Build the app, run `work` with it, and always close it; known errors become clean CLI errors.

    With `start`, background jobs left by an earlier run resume first (inspection commands leave them
    alone); on the way out pending work gets a grace period and otherwise stays in the journal.
    """

    async def main() -> T:
        app = build_app(settings)
        try:
            if start:
                await app.start(schedule=schedule)
            return await work(app)
        finally:
            await app.aclose()

    try:
        return asyncio.run(main())
    except CompanionError as error:
        raise click.ClickException(str(error)) from error


def _settings(ctx: click.Context, **overrides: Any) -> Settings:
    try:
        settings = load_settings(data_dir=ctx.obj.get("data_dir"), **overrides)
    except CompanionError as error:
        raise click.ClickException(str(error)) from error
    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    return settings


def user_id_for(name: str) -> str:
    """A terminal user name becomes `cli:<name>`; a platform-qualified id (`telegram:7`) is kept."""
    return name if ":" in name else f"cli:{name}"


@click.group(epilog=EPILOG, context_settings={"max_content_width": 110})
@click.option("--data-dir", type=click.Path(file_okay=False), help="Overrides COMPANION_DATA_DIR.")
@click.version_option(package_name="companion")
@click.pass_context
def cli(ctx: click.Context, data_dir: str | None) -> None:
    """Companion: a character who remembers you, on Discord, Telegram and in your terminal."""
    ctx.obj = {"data_dir": data_dir}


@cli.command()
@click.option("--persona", "persona_id", help="Persona id (default: the configured default persona).")
@click.option("--user", "user_name", default=getpass.getuser, show_default="your login name", help="Who you are.")
@click.pass_context
def chat(ctx: click.Context, persona_id: str | None, user_name: str) -> None:
    """Chat in the terminal. With piped input: one message per line, replies on stdout."""
    settings = _settings(ctx)
    interactive = sys.stdin.isatty()
    if settings.uses_embedded_model:
        click.echo(EMBEDDED_MODEL_NOTICE, err=True)

    async def talk(app: App) -> None:
        await TerminalChat(
            app.companion,
            persona_id=persona_id,
            user_name=user_name,
            read_line=stdin_reader(sys.stdin, echo_prompt=interactive),
            output=sys.stdout,
            interactive=interactive,
        ).run()
        if not interactive:
            await app.companion.tasks.drain()  # a script ends once what it said has been remembered

    _run(settings, talk, start=True, schedule=interactive)


@cli.group()
def memory() -> None:
    """Inspect what the companion remembers, one (persona, user) scope at a time."""


def _scope_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--user", "user_name", required=True, help="User: a terminal name or a platform id (telegram:7)."
    )(command)
    return click.option("--persona", "persona_id", required=True, help="Persona id.")(command)


@memory.command("list")
@_scope_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON with every field.")
@click.pass_context
def memory_list(ctx: click.Context, persona_id: str, user_name: str, as_json: bool) -> None:
    """List the memories of one scope, most important first."""
    settings = _settings(ctx)

    async def show(app: App) -> None:
        scope = Scope(app.companion.persona(persona_id).id, user_id_for(user_name))
        records = await app.companion.memories(scope)
        if as_json:
            click.echo(json.dumps([record.to_dict() for record in records], ensure_ascii=False, indent=2))
            return
        if not records:
            click.echo(f"No memories for {scope}.")
        for record in records:
            click.echo(f"{record.id}  {record.category:<7} {record.importance:5.2f}  {record.content}")

    _run(settings, show)


@memory.command("history")
@_scope_options
@click.option("--id", "memory_id", help="Only the changes of this memory.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def memory_history(ctx: click.Context, persona_id: str, user_name: str, memory_id: str | None, as_json: bool) -> None:
    """Show how the background roles changed a scope's memories (old -> new, who, when)."""
    settings = _settings(ctx)

    async def show(app: App) -> None:
        scope = Scope(app.companion.persona(persona_id).id, user_id_for(user_name))
        entries = app.journal.history(scope, memory_id)
        if as_json:
            click.echo(json.dumps([_jsonable(asdict(entry)) for entry in entries], ensure_ascii=False, indent=2))
            return
        if not entries:
            click.echo(f"No history for {scope}.")
        for entry in entries:
            change = f"{entry.old_content!r} -> {entry.new_content!r}"
            click.echo(f"{entry.at:%Y-%m-%d %H:%M}  {entry.memory_id}  {entry.action:<7} by {entry.actor}: {change}")

    _run(settings, show)


@memory.command("dead-letters")
@click.option("--persona", "persona_id", help="Only this persona (with --user).")
@click.option("--user", "user_name", help="Only this user (with --persona).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def memory_dead_letters(ctx: click.Context, persona_id: str | None, user_name: str | None, as_json: bool) -> None:
    """List background work that failed for good (unreadable monitor output, jobs out of retries)."""
    if (persona_id is None) != (user_name is None):
        raise click.UsageError("give both --persona and --user, or neither for every scope")
    settings = _settings(ctx)

    async def show(app: App) -> None:
        scope = None
        if persona_id and user_name:
            scope = Scope(app.companion.persona(persona_id).id, user_id_for(user_name))
        letters = app.journal.dead_letters(scope)
        if as_json:
            rows = [{**_jsonable(asdict(letter)), "scope": str(letter.scope)} for letter in letters]
            click.echo(json.dumps(rows, ensure_ascii=False, indent=2))
            return
        if not letters:
            click.echo("No dead letters.")
        for letter in letters:
            click.echo(f"{letter.at:%Y-%m-%d %H:%M}  {letter.id}  {letter.kind:<9} {letter.scope}: {letter.error}")

    _run(settings, show)


@cli.command()
@click.pass_context
def run(ctx: click.Context) -> None:
    """Run the bot on every platform whose token is configured, with the maintenance scheduler."""
    settings = _settings(ctx)
    if settings.discord_token is None and settings.telegram_token is None:
        raise click.ClickException(
            "no platform is configured: set DISCORD_TOKEN and/or TELEGRAM_TOKEN; for a local chat use `companion chat`"
        )
    if settings.uses_embedded_model:
        click.echo(EMBEDDED_MODEL_NOTICE, err=True)

    async def serve(app: App) -> None:
        serving = asyncio.current_task()
        assert serving is not None
        for stop in (signal.SIGINT, signal.SIGTERM):  # both stop the platforms; the app then closes cleanly
            asyncio.get_running_loop().add_signal_handler(stop, serving.cancel)
        try:
            async with asyncio.TaskGroup() as platforms:  # one platform failing for good stops the others
                for platform in _platforms(settings):
                    platforms.create_task(platform(app))
        except* CompanionError as failed:
            raise failed.exceptions[0] from None
        except* asyncio.CancelledError:
            click.echo("stopped; pending background work is saved and resumes at the next start", err=True)

    _run(settings, serve, start=True, schedule=True)


def _platforms(settings: Settings) -> list[Callable[[App], Coroutine[Any, Any, None]]]:
    """One coroutine per configured platform; platform libraries load only when their platform runs."""
    platforms = []
    if settings.telegram_token is not None:
        from .telegram_adapter import run_telegram

        token = settings.telegram_token.get_secret_value()
        platforms.append(lambda app: run_telegram(app, token, settings.telegram_base_url))
    if settings.discord_token is not None:
        from .discord_adapter import run_discord

        discord_token = settings.discord_token.get_secret_value()
        platforms.append(lambda app: run_discord(app, discord_token))
    return platforms


@cli.command()
@click.pass_context
def maintenance(ctx: click.Context) -> None:
    """Run the memory maintenance once (decay, idle summaries, reviews), for deployments using system cron."""
    settings = _settings(ctx)

    async def run(app: App) -> None:
        report = await app.lifecycle.run_decay()
        idle = await app.lifecycle.summarize_idle()
        await app.companion.tasks.drain()
        click.echo(
            f"decay: {report.scanned} due, {report.deleted} deleted, {len(report.reviews)} reviewed, "
            f"{report.rescheduled} rescheduled; {idle} idle conversations summarised"
        )

    _run(settings, run, start=True)


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value.isoformat() if isinstance(value, datetime) else value for key, value in row.items()}


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="companion")
