"""`companion users show|link|unlink`: the operator sees and changes which identities are one person."""

from __future__ import annotations

from click.testing import CliRunner

from bot.app import App
from bot.cli.main import cli
from knowledge.records import Scope
from tests.fakes.earlier_run import earlier_run

TERMINAL, TELEGRAM = Scope("xiaoxiang", "cli:alice"), Scope("xiaoxiang", "telegram:7")


def users(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(cli, ["users", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_an_operator_links_shows_and_unlinks_identities(runner: CliRunner) -> None:
    def store(app: App) -> None:
        app.knowledge.add(TERMINAL, "Alice has a cat named Mochi", category="fact", source="user")
        app.knowledge.add(TELEGRAM, "Alice plays the cello", category="fact", source="user")

    earlier_run(store)
    assert users(runner, "show") == "no identities are linked\n"

    linked = users(runner, "link", "alice", "telegram:7")

    assert "Linked: cli:alice, telegram:7" in linked and "Joined 2 memories" in linked
    [line] = users(runner, "show").splitlines()
    person = line.split(":")[0] + ":" + line.split(":")[1]
    assert line == f"{person}: cli:alice, telegram:7"
    assert users(runner, "show", "telegram:7") == f"telegram:7 belongs to {person}: cli:alice, telegram:7\n"
    memories = runner.invoke(cli, ["memory", "list", "--user", "telegram:7"])
    assert "Mochi" in memories.output and "cello" in memories.output  # the CLI's scopes resolve through links

    assert users(runner, "unlink", "telegram:7") == f"telegram:7 unlinked; {person} keeps cli:alice\n"
    assert users(runner, "show", "telegram:7") == "telegram:7: not linked (its memory is its own)\n"
    refused = runner.invoke(cli, ["users", "unlink", "telegram:7"])
    assert refused.exit_code != 0 and "not linked" in refused.output
