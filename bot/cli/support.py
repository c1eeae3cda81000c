"""What every `companion` command shares: settings, running work with a built app, scopes, JSON."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from bot.cli.ownership import live_app, run_in_data_dir
from bot.config import Settings, load_settings, renamed_settings
from bot.log_redaction import redact_secrets
from core.errors import CompanionError
from knowledge.records import Scope

if TYPE_CHECKING:
    from bot.app import App

T = TypeVar("T")
log = logging.getLogger(__name__)


def run_app(
    settings: Settings,
    work: Callable[[App], Coroutine[Any, Any, T]],
    *,
    start: bool = False,
    schedule: bool = False,
    owner: bool = False,
) -> T:
    """Build the app, run `work` with it, and always close it; known errors become clean CLI errors.

    With `start`, background jobs left by an earlier run resume first (inspection commands leave them
    alone); on the way out pending work gets a grace period and otherwise stays in the journal. While
    a bot owns the data directory, the command is carried out by it (`ownership.py`); an `owner` (run,
    chat) refuses to start beside another.
    """
    try:
        return run_in_data_dir(settings, work, start=start, schedule=schedule, owner=owner)
    except CompanionError as error:
        if _debugging():
            raise
        raise click.ClickException(str(error)) from error


def _debugging() -> bool:
    """Whether `--debug` asks for tracebacks instead of one-line errors."""
    ctx = click.get_current_context(silent=True)
    return ctx is not None and bool((ctx.find_root().obj or {}).get("debug"))


def cli_settings(ctx: click.Context) -> Settings:
    """The settings for this invocation (with `--data-dir`), logging set up and each old setting name in use
    named once; errors become CLI errors."""
    if (live := live_app()) is not None:
        return live.app.settings  # a command forwarded to the running bot acts on the bot's own settings
    try:
        settings = load_settings(data_dir=ctx.obj.get("data_dir"))
    except CompanionError as error:
        if _debugging():
            raise
        raise click.ClickException(str(error)) from error
    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    # The connection pools warn at every try to reconnect while PostgreSQL is away; the outage is ours to tell,
    # once as it starts and once as it ends (bot/platforms/outage.py); COMPANION_LOG_LEVEL=DEBUG shows their tries.
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    redact_secrets(settings.secrets())
    for notice in renamed_settings():
        log.warning(notice)
    return settings


def user_id_for(name: str) -> str:
    """A terminal user name becomes `cli:<name>`; a platform-qualified id (`telegram:7`) is kept."""
    from bot.platforms.terminal import terminal_user  # the terminal, with the companion, loads only when needed

    return name if ":" in name else str(terminal_user(name))


def scope_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--persona` and `--user`, which name one scope; the persona may be left to the default (read-only use)."""
    command = _user_option(command)
    return click.option("--persona", "persona_id", help="Persona id (default: COMPANION_DEFAULT_PERSONA).")(command)


def changing_scope_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--persona` and `--user` for a command that changes or deletes memories: both must be named."""
    command = _user_option(command)
    return click.option(
        "--persona", "persona_id", required=True, help="Persona id (required: this command changes memories)."
    )(command)


def _user_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--user", "user_name", required=True, help="User: a terminal name or a platform id (telegram:7)."
    )(command)


def run_in_scope(
    ctx: click.Context, persona_id: str | None, user_name: str, work: Callable[[App, Scope], Awaitable[None]]
) -> None:
    """Run `work(app, scope)` for the scope named on the command line."""

    async def run(app: App) -> None:
        await work(app, scope_of(app, persona_id, user_name))

    run_app(cli_settings(ctx), run)


def scope_of(app: App, persona_id: str | None, user_name: str) -> Scope:
    """The scope named on the command line (a linked identity names its person's); an unknown persona is an error
    that lists the known ones."""
    return app.companion.scope(persona_id, user_id_for(user_name))


def keep_backup(path: Path) -> Path | None:
    """Move a file that is about to be overwritten to `<name>.bak`; returns where, if it existed."""
    if not path.exists():
        return None
    backup = path.with_name(path.name + ".bak")
    path.replace(backup)
    return backup


def jsonable(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its datetimes as ISO strings."""
    return {key: value.isoformat() if isinstance(value, datetime) else value for key, value in row.items()}
