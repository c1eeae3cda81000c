"""`companion checkins …`: what the companion plans to write first, and what became of what it wrote."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from bot.cli.support import cli_settings, run_app

if TYPE_CHECKING:
    from bot.app import App

RECENT = timedelta(days=7)  # done check-ins listed without --due


@click.group()
def checkins() -> None:
    """Check-ins: the companion writing first to the users who want it."""


@checkins.command("list")
@click.option("--due", "due_only", is_flag=True, help="Only those due now (planned, not yet sent).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON with every field.")
@click.pass_context
def checkins_list(ctx: click.Context, due_only: bool, as_json: bool) -> None:
    """The planned check-ins, per user, and those of the last 7 days (sent, dropped, cancelled, failed, and why).

    Times are in each user's time zone. Beside a running bot, the bot answers.
    """

    async def show(app: App) -> None:
        now = app.clock.now()
        log = app.journal.checkins
        found = log.listing(since=now - RECENT, due_by=now if due_only else None)
        if as_json:
            click.echo(json.dumps([checkin.to_dict() for checkin in found], ensure_ascii=False, indent=2))
            return
        if not app.settings.checkins.enabled:
            click.echo("check-ins are switched off ([checkins] enabled = false): nothing is planned or sent")
        if not found:
            click.echo("no check-ins due" if due_only else "no check-ins planned or sent in the last 7 days")
        for checkin in found:
            zone = app.user_settings.time_zone(checkin.scope)
            note = f"  ({checkin.note})" if checkin.note else ""
            memory = f" {checkin.memory_id}" if checkin.memory_id else ""
            due = checkin.due_at.astimezone(zone)
            click.echo(f"{checkin.scope}  {checkin.state:<9} {checkin.rule:<12} due {due:%Y-%m-%d %H:%M}{memory}{note}")

    run_app(cli_settings(ctx), show)
