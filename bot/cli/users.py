"""`companion users …`: which identities are one person, and linking or unlinking them as an operator would."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import click

from bot.cli.support import cli_settings, run_app, user_id_for
from core import phrasebook
from knowledge.people.links import is_person

if TYPE_CHECKING:
    from bot.app import App


@click.group()
def users() -> None:
    """People: the platform identities (telegram:7, discord:99, a terminal name) that share one memory."""


@users.command("show")
@click.argument("user", required=False)
@click.pass_context
def users_show(ctx: click.Context, user: str | None) -> None:
    """Every linked person with their identities; given USER (a terminal name or telegram:7), only theirs."""

    async def show(app: App) -> None:
        if user is None:
            people = app.links.people()
            if not people:
                click.echo("no identities are linked")
            for person, identities in people.items():
                click.echo(f"{person}: {', '.join(identities)}")
            return
        identity = user_id_for(user)
        person = app.links.person_of(identity)
        if not is_person(person):
            click.echo(f"{identity}: not linked (its memory is its own)")
            return
        click.echo(f"{identity} belongs to {person}: {', '.join(app.links.members(person))}")

    run_app(cli_settings(ctx), show)


@users.command("link")
@click.argument("first")
@click.argument("second")
@click.pass_context
def users_link(ctx: click.Context, first: str, second: str) -> None:
    """Make FIRST and SECOND one person, joining their memories (as `/link` does, without a code).

    Only for identities you know belong to one person: every persona's memory of both becomes one.
    """

    async def link(app: App) -> None:
        joining = await asyncio.to_thread(app.links.join, user_id_for(first), user_id_for(second), app.clock.now())
        report = await app.companion.join(joining)
        click.echo(phrasebook.linked(app.links.members(joining.person_id), report, already=joining.already))

    run_app(cli_settings(ctx), link)


@users.command("unlink")
@click.argument("user")
@click.pass_context
def users_unlink(ctx: click.Context, user: str) -> None:
    """Detach USER from its person (as `/unlink` sent by it): it starts fresh, the memory stays with the others."""

    async def unlink(app: App) -> None:
        person = await asyncio.to_thread(app.links.detach, user_id_for(user))
        if person is None:
            raise click.ClickException(f"{user_id_for(user)} is not linked to another identity")
        click.echo(f"{user_id_for(user)} unlinked; {person} keeps {', '.join(app.links.members(person))}")

    run_app(cli_settings(ctx), unlink)
