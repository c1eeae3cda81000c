"""Forgetting, proven on disk: a secret stored through the real paths is gone from every byte of the data directory.

The secret goes in as a user would put it there: chat turns whose monitor ADDs and UPDATEs it, a turn
whose monitor answer is unreadable (a dead letter), an episode written by the summarizer, the history
index, and an export (with its .bak) written by the CLI into the data directory. Then it is forgotten
by one route, and a raw byte scan of every file (chromadb's included, with no VACUUM but the
service's own) plus a look at every live SQLite row must find it nowhere.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from bot.app import App, build_app
from bot.cli.main import cli
from bot.config import Settings
from bot.platforms.terminal import TerminalChat
from core.companion import Companion
from knowledge.forget.privacy_scan import scan_directory
from knowledge.forget.target import ForgetTarget
from knowledge.memory.scope_ids import ScopeIds
from knowledge.records import MemoryRecord, Scope
from knowledge.search.embedding import Embedder
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT, MONITOR, SUMMARIZER, Body, monitor_rules, turn_user_text, update

SECRET = "ZQX-4471-SECRET"
FACT = f"Alice's passport number is {SECRET}"
UPDATED = f"Alice's passport number is {SECRET}, in a new booklet"
FIRST_MESSAGE = f"my passport number is {SECRET}"
SOURCE_ID = "telegram:7:100"  # the platform id of the first message, for the platform's deletion


async def say(companion: Companion, text: str, *, source_id: str | None = None) -> None:
    result = await companion.handle(make_message(text, source_id=source_id))
    await result.text()


def cli_run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


async def store_the_secret(app: App, fake_openai: FakeOpenAIServer, alice: Scope) -> None:
    companion = app.companion
    fake_openai.set_default(
        MONITOR,
        monitor_rules(
            {
                "my passport number is": f"[ADD] {FACT}",
                "new booklet": update("passport", UPDATED),
                "remind me": "I would rather not answer that.",  # unreadable twice: a dead letter
            }
        ),
    )
    fake_openai.set_default(SUMMARIZER, f"Alice told 小祥 her passport number, {SECRET}.")
    fake_openai.set_default(CHAT, f"Noted: {SECRET}.")  # replies quote it too
    await say(companion, FIRST_MESSAGE, source_id=SOURCE_ID)
    await companion.tasks.drain()
    await say(companion, f"I got a new booklet, the number is still {SECRET}")
    await companion.tasks.drain()
    await say(companion, f"remind me later that {SECRET} is on my passport")
    await companion.tasks.drain()
    await companion.new_conversation(None, f"dm:{alice.user_id}")  # the summarizer writes an episode
    await companion.tasks.drain()
    await companion.lifecycle.index_history()
    app.clock.advance(days=6)  # the week is over: its chapter is written from the episode
    await companion.lifecycle.plan_chapters()
    await companion.tasks.drain()

    memories = {record.category: record.content for record in companion.knowledge.memories(alice)}
    assert memories == {"fact": UPDATED, "episode": memories["episode"], "chapter": memories["chapter"]}
    assert SECRET in memories["episode"] and SECRET in memories["chapter"]
    assert [change.new_content for change in app.journal.changes.changes(alice)] == [UPDATED]
    assert len(app.journal.jobs.dead_letters(alice)) == 1
    export = app.settings.storage.data_dir / "alice.md"
    for _ in range(2):  # the second export keeps the first as alice.md.bak
        await asyncio.to_thread(
            cli_run, "memory", "export", "--persona", "xiaoxiang", "--user", "alice", "-o", str(export)
        )
    assert Path(f"{export}.bak").exists()
    # held through a database outage at a stop: kept in the spool file for the next start
    companion.keep_for_next_start(make_message(f"also, {SECRET} is on my passport"), group=False)
    before = scan_directory(app.settings.storage.data_dir, SECRET)
    assert app.settings.storage.data_dir / "held-messages.jsonl" in before.in_files
    assert {place.split(": ")[1] for place in before.in_rows} >= {
        "messages.content",
        "memory_history.new_content",
        "dead_letters.payload",
        "embeddings_queue.metadata",
        "embedding_metadata.string_value",
    }


async def terminal(companion: Companion, *lines: str) -> str:
    """The terminal chat fed `lines`, as a person would type them; returns what it printed."""
    import io

    answers = iter(lines)

    async def read_line(prompt: str) -> str | None:
        return next(answers, None)

    output = io.StringIO()
    chat = TerminalChat(
        companion, persona_id=None, user_name="alice", read_line=read_line, output=output, interactive=False
    )
    await chat.run()
    return output.getvalue()


async def forget_everything(app: App, alice: Scope) -> None:
    assert "Done. I forgot" in await terminal(app.companion, "/forget", "yes")


async def forget_what(app: App, alice: Scope) -> None:
    printed = await terminal(app.companion, "/forget my passport number ZQX-4471", "yes")
    assert FIRST_MESSAGE in printed and "Done. I forgot" in printed  # shown before it went


async def forget_typed(app: App, alice: Scope) -> None:
    await say(app.companion, "forget my passport number ZQX-4471")  # no "is": only the code is shared
    await app.companion.tasks.drain()


def secret_fact(app: App, alice: Scope) -> MemoryRecord:
    [fact] = [
        record for record in app.companion.knowledge.memories(alice, categories=["fact"]) if SECRET in record.content
    ]
    return fact


async def forget_by_cli_id(app: App, alice: Scope) -> None:
    fact = secret_fact(app, alice)
    await asyncio.to_thread(cli_run, "memory", "forget", "--persona", "xiaoxiang", "--user", "alice", fact.id)


async def forget_all_by_cli(app: App, alice: Scope) -> None:
    await asyncio.to_thread(cli_run, "memory", "forget", "--persona", "xiaoxiang", "--user", "alice", "--all", "--yes")


async def console(app: App, method: str, path: str) -> None:
    """A call to the operator console's API, as an operator's script would make it."""
    import httpx

    from bot.console.access import Access
    from bot.console.server import console_app

    transport = httpx.ASGITransport(app=console_app(app, Access("token")))
    async with httpx.AsyncClient(transport=transport, base_url="http://console.test") as client:
        response = await client.request(method, path, headers={"authorization": "Bearer token"})
    assert response.status_code == 200, response.text


async def forget_in_console_by_id(app: App, alice: Scope) -> None:
    fact = secret_fact(app, alice)
    await console(app, "DELETE", f"/api/memories/{fact.id}?persona=xiaoxiang&user=cli:alice")


async def forget_all_in_console(app: App, alice: Scope) -> None:
    await console(app, "DELETE", "/api/scopes?persona=xiaoxiang&user=cli:alice")


async def platform_delete(app: App, alice: Scope) -> None:
    assert await app.companion.message_deleted(SOURCE_ID)


ROUTES: dict[str, Callable[[App, Scope], Awaitable[None]]] = {
    "/forget": forget_everything,
    "/forget <what>": forget_what,
    "typed in chat": forget_typed,
    "CLI by id": forget_by_cli_id,
    "CLI --all": forget_all_by_cli,
    "console by id": forget_in_console_by_id,
    "console, the whole user": forget_all_in_console,
    "platform deletion": platform_delete,
}


def assert_gone(app: App, alice: Scope) -> None:
    app.companion.knowledge.compact()  # as the bot does within minutes: the deleted vectors go too
    data_dir = app.settings.storage.data_dir
    report = scan_directory(data_dir, SECRET)
    assert report.in_files == {} and report.in_rows == {}, (report.in_files, report.in_rows)
    assert any(path.name == "chroma.sqlite3" for path in report.scanned)
    checked = cli_run("privacy-check", "--persona", "xiaoxiang", "--user", "alice", SECRET)
    assert "not found anywhere" in checked and "scanned chroma/chroma.sqlite3" in checked
    assert "vector index still holds" not in checked
    history = cli_run("memory", "history", "--persona", "xiaoxiang", "--user", "alice")
    assert "ZQX" not in history
    assert_ids_in_step(app, alice)


def assert_ids_in_step(app: App, alice: Scope) -> None:
    """The scope's listed memory ids are those chromadb holds, and once none is left none of its rows is."""
    ids = ScopeIds(app.settings.storage.data_dir / "companion.sqlite3")
    try:
        listed = {memory_id for scope, memory_id in ids.listed() if scope == alice}
    finally:
        ids.close()
    assert listed == set(app.knowledge._every_id(alice))
    if not listed:
        rows = scan_directory(app.settings.storage.data_dir, alice.user_id).in_rows
        assert not [place for place in rows if ": memory_ids." in place], rows


@pytest.mark.parametrize("route", list(ROUTES))
async def test_a_forgotten_secret_leaves_no_byte_in_the_data_directory(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope, route: str
) -> None:
    await store_the_secret(app, fake_openai, alice)
    remembered = app.companion.knowledge.queries  # texts embedded lately, in this process's memory
    assert any(SECRET in text for text in remembered.texts())
    await ROUTES[route](app, alice)
    await app.companion.tasks.drain()
    assert await app.compact_vectors()  # the deleted memories' vectors leave the vector index too
    await asyncio.to_thread(assert_gone, app, alice)
    if not route.startswith("CLI"):  # a CLI command is another process: the bot's texts age out in minutes
        assert not any(SECRET in text for text in remembered.texts())


@pytest.mark.parametrize("route", ["/forget", "/forget <what>", "platform deletion"])
async def test_a_forget_racing_an_in_flight_monitor_job_is_not_undone(
    settings: Settings, clock: FakeClock, embedder: Embedder, fake_openai: FakeOpenAIServer, alice: Scope, route: str
) -> None:
    thinking, answer = threading.Event(), threading.Event()

    def monitor(body: Body) -> str:
        if "passport" not in turn_user_text(body):  # the job run again after the forget: the text is gone
            return "[SKIP]"
        thinking.set()
        answer.wait(30)  # the forced race: the forget lands while the monitor is thinking
        return f"[ADD] {FACT}"

    fake_openai.set_default(MONITOR, monitor)
    fake_openai.set_default(CHAT, "Noted.")
    app = await build_app(settings.changed(llm={"timeout": 60}), clock=clock, embedder=embedder)
    try:
        await say(app.companion, FIRST_MESSAGE, source_id=SOURCE_ID)
        assert await asyncio.to_thread(thinking.wait, 30)
        await ROUTES[route](app, alice)
        answer.set()
        await app.companion.tasks.drain()
        assert app.companion.knowledge.memories(alice) == []  # the job did not write it back
        assert app.journal.jobs.pending_jobs() == []
        await asyncio.to_thread(assert_gone, app, alice)
    finally:
        answer.set()
        await app.aclose()


async def test_forget_what_matches_the_distinctive_content_not_the_literal_phrase(
    app: App, alice: Scope, bob: Scope
) -> None:
    knowledge = app.companion.knowledge
    knowledge.add(alice, FACT, category="fact", source="user")
    knowledge.add(alice, "Alice's passport is blue", category="fact", source="user")
    knowledge.add(bob, FACT, category="fact", source="user")
    plan = await app.companion.forgetting.find(alice, "my passport number ZQX-4471")
    assert [record.content for record in plan.memories] == [FACT]  # shown before deleting
    await app.companion.forgetting.forget(plan)
    assert [record.content for record in knowledge.memories(alice)] == ["Alice's passport is blue"]
    assert [record.content for record in knowledge.memories(bob)] == [FACT]  # another scope is never touched


@pytest.mark.parametrize(
    ("phrase", "text", "matches"),
    [
        ("my passport number ZQX-4471", "my passport number is ZQX-4471-SECRET", True),
        ("my PIN 4471", "the code for the bank card: 4471", True),
        ("my ex Tom", "Tom called me yesterday", True),
        ("my ex Tom", "my ex is a nice person", False),
        ("that I'm afraid of spiders", "Alice is afraid of spiders", True),
        ("my sister", "I love ramen", False),
        ("前男友", "主人的前男友叫小刚", True),
        ("前男友", "主人最近在学吉他", False),
    ],
)
def test_what_a_phrase_matches(phrase: str, text: str, matches: bool) -> None:
    assert ForgetTarget.of_phrase(phrase).matches(text) is matches


GROUP = "telegram:chat:-1001"
LOCKER = "zebra-4711"


@pytest.mark.parametrize("route", ["/forget", "/forget <what>"])
async def test_what_the_companion_repeated_to_others_in_a_group_is_forgotten_with_the_user(
    app: App, fake_openai: FakeOpenAIServer, alice: Scope, bob: Scope, route: str
) -> None:
    companion = app.companion
    fake_openai.set_default(MONITOR, monitor_rules({"what did Alice say": f"[ADD] Alice's locker code is {LOCKER}"}))

    def chat(body: Body) -> str:
        asked = str(body["messages"][-1]["content"])
        return f"Alice said her locker code is {LOCKER}." if "what did Alice say" in asked else "Nice!"

    fake_openai.set_default(CHAT, chat)
    in_group = {"conversation_id": GROUP}
    for text, user, name in [
        (f"my locker code is {LOCKER}", alice.user_id, "Alice"),
        ("what did Alice say?", bob.user_id, "Bob"),
        ("and the weather is nice today", bob.user_id, "Bob"),
    ]:
        result = await companion.handle(make_message(text, user_id=user, speaker_name=name, **in_group), group=True)
        await result.text()
        await companion.tasks.drain()
    told_bob = [message.content for message in app.history.messages(bob) if message.role == "assistant"]
    assert told_bob == [f"Alice said her locker code is {LOCKER}.", "Nice!"]
    assert [record.content for record in companion.knowledge.memories(bob)] == [f"Alice's locker code is {LOCKER}"]

    if route == "/forget":
        await companion.forgetting.everything(alice)
    else:
        await companion.forgetting.forget(await companion.forgetting.find(alice, f"my locker code {LOCKER}"))
    await companion.lifecycle.index_history()

    # Bob's own words and the reply that did not repeat it stay; what repeated Alice's secret is gone
    assert [message.content for message in app.history.messages(bob)] == [
        "what did Alice say?",
        "and the weather is nice today",
        "Nice!",
    ]
    assert companion.knowledge.memories(bob) == []
    report = scan_directory(app.settings.storage.data_dir, LOCKER)
    assert report.in_files == {} and report.in_rows == {}, (report.in_files, report.in_rows)


OTHER_FACTS = ("Alice loves ramen", "Alice's sister is called Anna", "Alice works night shifts at the hospital")
PORTRAIT = f"Alice works night shifts and loves ramen; her sister is Anna. Passport {SECRET}."
PORTRAIT_AFTER = "Alice works night shifts and loves ramen; her sister is Anna."


def profile_or_episode(body: Body) -> str:
    """The summarizer's model: a portrait from the memories it is shown, an episode note otherwise."""
    shown = str(body["messages"][-1]["content"])
    if "<<<MEMORIES" not in shown:
        return f"Alice told 小祥 her passport number, {SECRET}."
    return PORTRAIT if SECRET in shown else PORTRAIT_AFTER


@pytest.mark.parametrize("route", list(ROUTES))
async def test_a_forget_clears_the_profile_that_carries_it_at_once_and_it_is_written_again_from_what_remains(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope, route: str
) -> None:
    await store_the_secret(app, fake_openai, alice)
    for fact in OTHER_FACTS:
        app.knowledge.add(alice, fact, category="fact", source="user")
    fake_openai.set_default(SUMMARIZER, profile_or_episode)
    app.journal.profiles.mark_changed(alice, clock.now())
    assert await app.lifecycle.write_profiles() == 1
    await app.companion.tasks.drain()
    assert app.journal.profiles.get(alice).text == PORTRAIT  # type: ignore[union-attr]

    await ROUTES[route](app, alice)
    await app.companion.tasks.drain()
    assert app.journal.profiles.get(alice) is None  # before "done": nothing of it is left to show
    assert await app.compact_vectors()
    await asyncio.to_thread(assert_gone, app, alice)

    if route.startswith("CLI"):
        return  # another process: this one's snapshot of the memories learns of it in the product's own way
    clock.advance(days=1)
    await app.lifecycle.write_profiles()
    await app.companion.tasks.drain()
    rewritten = app.journal.profiles.get(alice)
    if route in ("/forget", "console, the whole user"):
        assert rewritten is None  # nothing remains to write it from
    else:
        assert rewritten is not None and rewritten.text == PORTRAIT_AFTER


async def test_forgetting_one_memory_a_profile_was_written_from_clears_it_even_in_other_words(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope
) -> None:
    facts = [app.knowledge.add(alice, fact, category="fact", source="user") for fact in OTHER_FACTS]
    fake_openai.set_default(SUMMARIZER, "A nurse who likes noodles; one sister.")  # none of the facts' words
    app.journal.profiles.mark_changed(alice, clock.now())
    await app.lifecycle.write_profiles()
    await app.companion.tasks.drain()
    assert app.journal.profiles.get(alice) is not None
    await app.forgetting.memories(alice, [facts[0].id], actor="operator")
    assert app.journal.profiles.get(alice) is None
