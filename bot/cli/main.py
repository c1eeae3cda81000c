"""The `companion` command line."""

from __future__ import annotations

import asyncio
import getpass
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import click

from bot.cli.checkins import checkins
from bot.cli.doctor import doctor
from bot.cli.memory import memory
from bot.cli.migrate import migrate
from bot.cli.persona import persona
from bot.cli.support import cli_settings, run_app, scope_options, user_id_for
from bot.cli.users import users
from bot.config import CONFIG_ENV, DEFAULT_WEB_PORT, Settings, settings_help
from bot.startup import DEBUG_HINT, PRIVATE_FILES
from core.errors import CompanionError
from knowledge.forget.privacy_scan import scan_directory
from knowledge.memory.chroma_erasure import COMPACTION_DUE
from knowledge.records import Scope

if TYPE_CHECKING:  # the app, the models and the platforms load only in the commands that need them
    from bot.app import App
    from bot.platforms.discord.adapter import Shards

EPILOG = f"""\b
Settings come from an optional TOML file (./companion.toml, or the file named by {CONFIG_ENV};
its tables and keys are in the second column) and from these environment variables, which win.
Secrets are read from the environment only.
{settings_help()}
"""


class _OneLineErrors(click.Group):
    """Any failure a command did not foresee is one line naming what failed; `--debug` shows the traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as error:
            if (ctx.obj or {}).get("debug"):
                raise
            raise click.ClickException(f"{type(error).__name__}: {error} {DEBUG_HINT}") from error


@click.group(cls=_OneLineErrors, epilog=EPILOG, context_settings={"max_content_width": 110})
@click.option("--data-dir", type=click.Path(file_okay=False), help="Overrides COMPANION_DATA_DIR.")
@click.option("--debug", is_flag=True, help="Show the traceback of an unexpected error.")
@click.option(
    "--accept-empty-memory",
    is_flag=True,
    help="Start even though the memory store is missing or new (after restoring what you could; see "
    "docs/operations/data-directory.md).",
)
@click.version_option(package_name="companion")
@click.pass_context
def cli(ctx: click.Context, data_dir: str | None, debug: bool, accept_empty_memory: bool) -> None:
    """Companion: a character who remembers you, on Discord, Telegram and in your terminal."""
    # Every file this process creates holds what people said (the databases, the vector index, exports):
    # its owner's alone, whatever the data directory's own mode, where SQLite and chromadb follow the umask.
    os.umask(PRIVATE_FILES)
    ctx.obj = {"data_dir": data_dir, "debug": debug, "accept_empty_memory": accept_empty_memory}


@cli.command()
@click.option("--persona", "persona_id", help="Persona id (default: the configured default persona).")
@click.option("--user", "user_name", default=getpass.getuser, show_default="your login name", help="Who you are.")
@click.pass_context
def chat(ctx: click.Context, persona_id: str | None, user_name: str) -> None:
    """Chat in the terminal. With piped input: one message per line, replies on stdout."""
    settings = cli_settings(ctx)
    interactive = sys.stdin.isatty()

    async def talk(app: App) -> None:
        from bot.app import load_models, startup_notices
        from bot.platforms.terminal import TerminalChat, stdin_reader

        _tell(startup_notices(settings))  # once the data directory is ours: a refused start says only why
        await load_models(app)
        await TerminalChat(
            app.companion,
            persona_id=persona_id,
            user_name=user_name,
            read_line=stdin_reader(sys.stdin, echo_prompt=interactive),
            output=sys.stdout,
            interactive=interactive,
        ).run()
        if not interactive:
            await app.tasks.drain()  # a script ends once what it said has been remembered

    run_app(settings, talk, start=True, schedule=interactive, owner=True)


@cli.command()
@click.option("--shards", "shard_count", type=click.IntRange(min=1), help="Discord: how many shards in all.")
@click.option(
    "--shard-ids", help="Discord: the shards this process runs, as 0,1 (default: all of them); needs --shards."
)
@click.pass_context
def run(ctx: click.Context, shard_count: int | None, shard_ids: str | None) -> None:
    """Run the bot on every platform whose token is configured, with the maintenance scheduler.

    Several processes may serve one bot in server mode (COMPANION_DATABASE_URL): Discord split into
    shards (--shards 4 --shard-ids 0,1 here, 2,3 elsewhere), Telegram through a webhook
    (COMPANION_TELEGRAM_WEBHOOK_URL) behind one proxy.
    """
    settings = cli_settings(ctx)
    shards = _shards(shard_count, shard_ids)
    if settings.discord.token is None and settings.telegram.token is None:
        raise click.ClickException(
            "no platform is configured: set COMPANION_DISCORD_TOKEN and/or COMPANION_TELEGRAM_TOKEN; for a local chat "
            "use `companion chat`"
        )

    async def serve(app: App) -> None:
        from bot.app import load_models, startup_notices

        _tell(startup_notices(settings))
        await load_models(app)
        _stop_on_signals()
        try:
            async with asyncio.TaskGroup() as platforms:  # one platform failing for good stops the others
                for platform in _platforms(settings, shards):
                    platforms.create_task(platform(app))
                if settings.web.port is not None:
                    platforms.create_task(_serve_console(app, settings.web.host, settings.web.port))
        except* CompanionError as failed:
            raise failed.exceptions[0] from None
        except* asyncio.CancelledError:
            click.echo("stopped; pending background work is saved and resumes at the next start", err=True)

    run_app(settings, serve, start=True, schedule=True, owner=True)


@cli.command()
@click.option("--host", help="Address to listen on (default: COMPANION_WEB_HOST, else 127.0.0.1).")
@click.option(
    "--port", type=click.IntRange(0, 65535), help=f"Port (default: COMPANION_WEB_PORT, else {DEFAULT_WEB_PORT})."
)
@click.pass_context
def web(ctx: click.Context, host: str | None, port: int | None) -> None:
    """Serve the operator console: each user's memories to read, correct and forget, in a browser or as JSON.

    Every page and API call needs the operator token (COMPANION_WEB_TOKEN; unset, one is made on the first
    start, printed once and kept owner-only in the data directory). `companion run` serves the console too
    when COMPANION_WEB_PORT is set.
    """
    settings = cli_settings(ctx)
    chosen_port = port if port is not None else settings.web.port or DEFAULT_WEB_PORT

    async def serve(app: App) -> None:
        _stop_on_signals()
        try:
            await _serve_console(app, host or settings.web.host, chosen_port)
        except asyncio.CancelledError:
            click.echo("console stopped", err=True)

    run_app(settings, serve, start=True, schedule=True, owner=True)


async def _serve_console(app: App, host: str, port: int) -> None:
    from bot.console.server import Console  # the web framework loads only where the console runs

    console = Console(app, host, port)
    click.echo(console.announcement(app.settings.storage.data_dir), err=True)
    await console.serve()


def _stop_on_signals() -> None:
    """SIGINT and SIGTERM cancel the task serving; the app then closes cleanly."""
    serving = asyncio.current_task()
    assert serving is not None
    for stop in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(stop, serving.cancel)


def _tell(notices: list[str]) -> None:
    for notice in notices:
        click.echo(notice, err=True)


def _shards(count: int | None, ids: str | None) -> Shards | None:
    """`--shards` and `--shard-ids` as Discord shards, or None to run unsharded."""
    if count is None:
        if ids is not None:
            raise click.BadParameter("needs --shards (how many shards in all)", param_hint="--shard-ids")
        return None
    from bot.platforms.discord.adapter import Shards

    try:
        chosen = tuple(range(count)) if ids is None else tuple(int(shard) for shard in ids.split(","))
        return Shards(count, chosen)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--shard-ids") from error


def _platforms(settings: Settings, shards: Shards | None = None) -> list[Callable[[App], Coroutine[Any, Any, None]]]:
    """One coroutine per configured platform; platform libraries load only when their platform runs."""
    platforms = []
    telegram, discord = settings.telegram, settings.discord
    if telegram.token is not None:
        from bot.platforms.telegram.adapter import Webhook, run_telegram

        token = telegram.token.get_secret_value()
        webhook = None
        if telegram.webhook_url:
            secret = telegram.webhook_secret
            webhook = Webhook(
                telegram.webhook_url,
                telegram.webhook_listen,
                telegram.webhook_port,
                None if secret is None else secret.get_secret_value(),
            )
        platforms.append(lambda app: run_telegram(app.platform("telegram"), token, telegram.base_url, webhook=webhook))
    if discord.token is not None:
        from bot.platforms.discord.adapter import run_discord

        discord_token = discord.token.get_secret_value()
        platforms.append(lambda app: run_discord(app.platform("discord"), discord_token, shards=shards))
    return platforms


@cli.command()
@click.pass_context
def maintenance(ctx: click.Context) -> None:
    """Run the memory maintenance once (decay, idle summaries, reviews, the night's consolidation, pruning), for
    deployments using system cron."""
    settings = cli_settings(ctx)

    async def run(app: App) -> None:
        report = await app.lifecycle.run_decay()
        idle = await app.lifecycle.summarize_idle()
        consolidated = await app.lifecycle.plan_consolidation()
        await app.tasks.drain()
        compacted = await app.compact_vectors()
        click.echo(
            f"decay: {report.scanned} due, {report.deleted} deleted, {len(report.reviews)} reviewed, "
            f"{report.rescheduled} rescheduled; {idle} idle conversations summarised; "
            f"{consolidated} users consolidated"
            + ("; vector index rebuilt without deleted vectors" if compacted else "")
        )

    run_app(settings, run, start=True)


@cli.command("privacy-check")
@scope_options
@click.argument("text")
@click.pass_context
def privacy_check(ctx: click.Context, persona_id: str | None, user_name: str, text: str) -> None:
    """Prove TEXT is gone: scan every file under the data directory (raw bytes and live SQLite rows) for it.

    Lists every file scanned and every place TEXT still is; exits 1 if it is anywhere. Nothing is changed.
    """
    settings = cli_settings(ctx)
    data_dir = settings.storage.data_dir
    scope = Scope(persona_id or settings.default_persona, user_id_for(user_name))  # whom the report is for
    report = scan_directory(data_dir, text)
    click.echo(f"privacy check for {scope} in {data_dir}: {len(report.scanned)} files scanned")
    for path in report.scanned:
        click.echo(f"  scanned {path.relative_to(data_dir)} ({path.stat().st_size:,} bytes)")
    for table in report.unreadable:
        click.echo(f"  could not read the rows of {table}; its bytes were scanned", err=True)
    for path, count in report.in_files.items():
        click.echo(f"FOUND {count} times in the bytes of {path.relative_to(data_dir)}")
    for place, rows in report.in_rows.items():
        click.echo(f"FOUND in {rows} live rows of {place}")
    if (data_dir / "chroma" / COMPACTION_DUE).exists():
        click.echo(
            "the vector index still holds the vectors (numbers, no text) of deleted memories until its next "
            "rebuild: within 5 minutes in a running bot, or now with `companion maintenance`"
        )
    if not report.clean:
        raise SystemExit(1)
    click.echo("not found anywhere: no file holds it, no live row holds it")


cli.add_command(checkins)
cli.add_command(doctor)
cli.add_command(memory)
cli.add_command(persona)
cli.add_command(migrate)
cli.add_command(users)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="companion")
