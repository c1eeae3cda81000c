"""`companion memory profile …`: show, edit or clear one user's profile, the portrait always in their prompt."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import click

from bot.cli.ownership import confirm, edit_text
from bot.cli.support import changing_scope_options, run_in_scope, scope_options
from core.background.profile_writer import PROFILE_TOKENS
from core.llm.client import count_tokens
from knowledge.journal.profiles import Profile
from knowledge.records import Scope

if TYPE_CHECKING:
    from bot.app import App


@click.group("profile")
def profile() -> None:
    """The user's profile: a short portrait written from their facts, always in their chat prompt."""


@profile.command("show")
@scope_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON: the text, its memories, author, when written.")
@click.pass_context
def profile_show(ctx: click.Context, persona_id: str | None, user_name: str, as_json: bool) -> None:
    """Show the profile, what it was written from and when."""

    async def show(app: App, scope: Scope) -> None:
        found = await asyncio.to_thread(app.journal.profiles.get, scope)
        if as_json:
            document = None
            if found is not None:
                document = {
                    "text": found.text,
                    "memory_ids": list(found.memory_ids),
                    "author": found.author,
                    "written_at": found.written_at.isoformat(),
                    "tokens": count_tokens(found.text),
                }
            click.echo(json.dumps(document, ensure_ascii=False, indent=2))
            return
        if found is None:
            click.echo(f"No profile for {scope} yet (one is written once enough facts are known).")
            return
        click.echo(found.text)
        sources = f"{len(found.memory_ids)} memories" if found.memory_ids else "by hand"
        click.echo(
            f"\n-- written {found.written_at:%Y-%m-%d %H:%M} UTC by {found.author} from {sources}; "
            f"{count_tokens(found.text)} of {PROFILE_TOKENS} tokens",
            err=True,
        )

    run_in_scope(ctx, persona_id, user_name, show)


@profile.command("edit")
@changing_scope_options
@click.option("--text", help="The new profile (without it: opens $EDITOR on the current one).")
@click.pass_context
def profile_edit(ctx: click.Context, persona_id: str, user_name: str, text: str | None) -> None:
    """Write the profile by hand; the background's next rewrite (when facts change) keeps your corrections."""

    async def edit(app: App, scope: Scope) -> None:
        found = await asyncio.to_thread(app.journal.profiles.get, scope)
        new_text = text
        if new_text is None:
            edited = edit_text("" if found is None else found.text, param="text")
            if edited is None or (found is not None and edited.strip() == found.text):
                click.echo("Nothing changed.")
                return
            new_text = edited
        new_text = new_text.strip()
        if not new_text:
            raise click.ClickException("a profile needs some text; to remove it use `companion memory profile clear`")
        if (tokens := count_tokens(new_text)) > PROFILE_TOKENS:
            raise click.ClickException(f"the profile is {tokens} tokens; the most is {PROFILE_TOKENS}")
        basis = "" if found is None else found.basis  # the facts it answers to: unchanged, no rewrite
        written = Profile(new_text, (), basis, "operator", app.clock.now())
        await asyncio.to_thread(app.journal.profiles.write, scope, written, requested_at=None)
        click.echo(new_text)

    run_in_scope(ctx, persona_id, user_name, edit)


@profile.command("clear")
@changing_scope_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def profile_clear(ctx: click.Context, persona_id: str, user_name: str, yes: bool) -> None:
    """Delete the profile; the background writes it again from the facts, at most a day after the last one."""

    async def clear(app: App, scope: Scope) -> None:
        if not yes:
            confirm(f"Delete the profile of {scope}?", param="yes")
        cleared = await asyncio.to_thread(app.journal.profiles.clear, scope, app.clock.now())
        click.echo("Profile deleted." if cleared else f"No profile for {scope}.")

    run_in_scope(ctx, persona_id, user_name, clear)
