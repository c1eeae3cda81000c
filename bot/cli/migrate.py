"""`companion migrate`: move an embedded data directory into server mode (PostgreSQL and a Chroma server)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import click

from bot.cli.support import cli_settings, run_app

if TYPE_CHECKING:
    from bot.app import App
    from knowledge.migration import MigrationReport

PLATFORMS = ("discord", "telegram")


@click.command()
@click.option(
    "--to", "url", required=True, metavar="URL", help="The server-mode database: postgresql://user:password@host/db."
)
@click.option("--chroma-host", help="The Chroma server for the memories (default: COMPANION_CHROMA_HOST).")
@click.option("--chroma-port", type=int, help="Its port (default: COMPANION_CHROMA_PORT).")
@click.pass_context
def migrate(ctx: click.Context, url: str, chroma_host: str | None, chroma_port: int | None) -> None:
    """Copy this data directory into server mode, then count both sides.

    Messages, history vectors, the change log, jobs, dead letters, token usage, user settings and
    /persona choices go to the PostgreSQL database at URL; memories, with their vectors, to the Chroma
    server. Both must be empty. The data directory is left as it was; no bot may be running on it.
    """
    settings = cli_settings(ctx)
    host, port = chroma_host or settings.storage.chroma_host, chroma_port or settings.storage.chroma_port
    if not host:
        raise click.ClickException("name the Chroma server for the memories: --chroma-host or COMPANION_CHROMA_HOST")
    embedded = settings.changed(storage={"database_url": None, "chroma_host": None})

    async def copy(app: App) -> MigrationReport:
        return await asyncio.to_thread(_copy, app, url, host, port)

    report = run_app(embedded, copy, owner=True)  # the directory is ours alone while it is copied
    click.echo(f"{'':<18}{'data directory':>16}{'server mode':>14}")
    for name, count in report.source.items():
        click.echo(f"{name:<18}{count:>16,}{report.target.get(name, 0):>14,}")
    if not report.matches:
        raise click.ClickException("the counts differ: the copy is incomplete (see above); do not switch over yet")
    click.echo(f"copied and verified; start the bots with COMPANION_DATABASE_URL and COMPANION_CHROMA_HOST={host}")


def _copy(app: App, url: str, host: str, port: int) -> MigrationReport:
    from bot.routing import PersonaChoices
    from knowledge.errors import StorageUnavailableError
    from knowledge.journal.place_personas import PlacePersonas
    from knowledge.memory.chroma_store import COLLECTION, open_chroma_client
    from knowledge.memory.store_guard import MemoryStoreGuard
    from knowledge.migration import TargetNotEmptyError, check_empty, copy_memories, copy_tables, verify
    from knowledge.sql.postgres import PostgresDatabase
    from knowledge.sql.sqlite import SQLiteDatabase

    data_dir = app.settings.storage.data_dir
    try:
        target = PostgresDatabase(url)
    except StorageUnavailableError as error:
        raise click.ClickException(f"--to: {error}") from error
    source = SQLiteDatabase(data_dir / "companion.sqlite3")
    clients = {
        "source": open_chroma_client(path=data_dir / "chroma"),
        "target": open_chroma_client(host=host, port=port),
    }
    try:
        chosen = {platform: PersonaChoices(data_dir / f"{platform}-personas.json").all() for platform in PLATFORMS}
        targets = {platform: PlacePersonas(target, platform) for platform in PLATFORMS}
        try:
            check_empty(target, clients["target"], sum(len(targets[platform].all()) for platform in PLATFORMS))
        except TargetNotEmptyError as error:
            raise click.ClickException(f"{error}; migrate into an empty database and Chroma server") from error
        copy_tables(source, target)
        for platform, choices in chosen.items():
            for place, persona_id in choices.items():
                targets[platform].set(place, persona_id)
        copy_memories(clients["source"], clients["target"])
        MemoryStoreGuard(target, COLLECTION).record(clients["target"])  # server mode checks it at every start
        report = verify(source, target, clients)
        for platform in PLATFORMS:
            report.source[f"{platform} personas"] = len(chosen[platform])
            report.target[f"{platform} personas"] = len(targets[platform].all())
        return report
    finally:
        source.close()
        target.close()
