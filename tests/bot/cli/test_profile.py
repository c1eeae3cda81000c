"""`companion memory profile show|edit|clear`: the operator reads, writes and clears a user's profile, and the
export carries it."""

from __future__ import annotations

from click.testing import CliRunner

from bot.cli.main import cli
from core.background.profile_writer import PROFILE_TOKENS

WHO = ("--persona", "xiaoxiang", "--user", "alice")


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_the_operator_edits_shows_and_clears_the_profile_and_the_export_carries_it() -> None:
    assert "No profile" in run("memory", "profile", "show", *WHO)
    run("memory", "profile", "edit", *WHO, "--text", "主人是护士，喜欢拉面。\n# not a heading")
    assert "主人是护士，喜欢拉面。" in run("memory", "profile", "show", *WHO)
    assert '"author": "operator"' in run("memory", "profile", "show", *WHO, "--json")
    exported = run("memory", "export", *WHO)
    assert exported.index("## Profile") < exported.index("## Active Memories") and "主人是护士" in exported
    assert "\\# not a heading" in exported  # a profile line never reads as a section of the file
    assert '"profile": "主人是护士' in run("memory", "export", *WHO, "--json")
    too_long = CliRunner().invoke(cli, ["memory", "profile", "edit", *WHO, "--text", "word " * 400])
    assert too_long.exit_code != 0 and f"the most is {PROFILE_TOKENS}" in too_long.output
    assert "Profile deleted." in run("memory", "profile", "clear", *WHO, "--yes")
    assert "No profile" in run("memory", "profile", "show", *WHO)
