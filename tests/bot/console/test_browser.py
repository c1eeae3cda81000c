"""The console in a real browser: Playwright driving Debian's chromium against `Console` serving a real app,
on the embedded stores and in server mode (PostgreSQL and a Chroma server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import chromadb
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect
from pydantic import SecretStr

from bot.app import App, build_app
from bot.config import Settings
from bot.console.server import Console
from knowledge.forget.privacy_scan import scan_directory
from knowledge.memory.chroma_store import COLLECTION
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from tests.bot.console.conftest import SCRIPT, TOKEN, seed
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SECRET = "QW-7731-LOCKER"
LOCKER = f"Alice's locker code is {SECRET}"
TRIP = "Alice is saving for a trip to Lisbon"

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (.ci/run installs it)")


@pytest.fixture(params=["sqlite", "server"])
async def served(
    request: pytest.FixtureRequest, settings: Settings, clock: FakeClock, embedder: Embedder
) -> AsyncIterator[tuple[App, str]]:
    """A real app with its console listening on a free loopback port; yields the app and the console's URL."""
    if request.param == "server":
        chroma = request.getfixturevalue("chroma_server")
        client = chromadb.HttpClient(host="127.0.0.1", port=chroma.port)
        if COLLECTION in {getattr(found, "name", found) for found in client.list_collections()}:
            client.delete_collection(COLLECTION)  # no memories of earlier tests
        storage = {
            "database_url": SecretStr(request.getfixturevalue("database_url")),
            "chroma_host": "127.0.0.1",
            "chroma_port": chroma.port,
        }
        settings = settings.changed(storage=storage)
    settings = settings.changed(web={"token": SecretStr(TOKEN)})
    async with await build_app(settings, clock=clock, embedder=embedder) as app:
        console = Console(app, "127.0.0.1", 0)
        serving = asyncio.create_task(console.serve())
        try:
            yield app, console.url
        finally:
            serving.cancel()
            with pytest.raises(asyncio.CancelledError):
                await serving


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield launched
        await launched.close()


async def log_in(page: Page, url: str) -> None:
    await page.goto(url)
    await expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    await page.get_by_label("Operator token").fill(TOKEN)
    await page.get_by_role("button", name="Log in").click()
    await expect(page.get_by_role("heading", name="Users")).to_be_visible()


async def test_an_operator_finds_a_user_edits_and_forgets_and_a_stranger_sees_nothing(
    served: tuple[App, str], browser: Browser, fake_openai: FakeOpenAIServer, alice: Scope, bob: Scope
) -> None:
    app, url = served
    seed(app, alice, "Alice", TRIP, LOCKER, f"Alice once typed {SCRIPT}")
    seed(app, bob, "Bob", "Bob keeps bees")

    stranger = await (await browser.new_context()).new_page()
    for path in ("", "?q=alice", "memories?persona=xiaoxiang&user=cli:alice", "api/scopes", "api/memories", "replies"):
        await stranger.goto(url + path)
        shown = await stranger.content()
        assert "Lisbon" not in shown and "cli:alice" not in shown and "Bob" not in shown, path

    page = await (await browser.new_context()).new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))  # an alert would mean a script ran
    await log_in(page, url)
    # the stylesheet the policy allows by its hash is applied (a blocked one leaves the browser's defaults)
    assert await page.evaluate("getComputedStyle(document.body).maxWidth") == "1120px"
    await page.get_by_label("Find a user").fill("ALI")
    await page.get_by_role("button", name="Find").click()
    await expect(page.get_by_role("link", name="cli:bob")).to_have_count(0)
    await page.get_by_role("link", name="cli:alice").click()
    await expect(page.get_by_role("heading", name="cli:alice")).to_be_visible()
    await expect(page.get_by_text(f"Alice once typed {SCRIPT}")).to_have_count(1)  # shown as text, not run
    assert dialogs == []

    trip = page.locator("tr.memory", has_text="Lisbon")
    await trip.locator("textarea").fill("Alice is saving for a trip to Porto")
    await trip.get_by_role("button", name="Save").click()
    await expect(page.get_by_role("status")).to_contain_text("Saved")
    edited = page.locator("tr.memory", has_text="Porto")
    await edited.get_by_text("History (1)").click()
    await expect(edited.get_by_text("by console")).to_be_visible()
    assert "Alice is saving for a trip to Porto" in {record.content for record in app.knowledge.memories(alice)}

    await page.locator("tr.memory", has_text=SECRET).get_by_role("button", name="Forget").click()
    await expect(page.get_by_role("status")).to_contain_text("Forgotten")
    await expect(page.get_by_text(SECRET)).to_have_count(0)
    await app.compact_vectors()  # as the bot does within minutes: the deleted vectors go too
    report = await asyncio.to_thread(scan_directory, app.settings.storage.data_dir, SECRET)
    assert report.in_files == {} and report.in_rows == {}
    assert not any(SECRET in record.content for record in app.knowledge.memories(alice))
    assert {record.content for record in app.knowledge.memories(bob)} == {"Bob keeps bees"}

    fake_openai.set_default(CHAT, "Porto, if I remember well!")
    await (await app.companion.handle(make_message("where am I going?"))).text()
    await page.reload()
    await page.get_by_role("link", name="Why it said what it said").click()
    await expect(page.get_by_text("Porto, if I remember well!")).to_be_visible()
    await page.get_by_text("What was in its prompt").first.click()
    trace = page.locator("details.trace").first
    await expect(trace.get_by_text("Alice is saving for a trip to Porto")).to_be_visible()
    await expect(trace.get_by_text("chat-model")).to_have_count(0)  # the model is in the heading, not the trace
    await expect(page.get_by_text("chat-model")).to_be_visible()
    await page.go_back()

    await page.get_by_role("checkbox", name="every memory").check()
    await page.get_by_role("button", name="Forget everything").click()
    await expect(page.get_by_text("Everything about that user is forgotten.")).to_be_visible()
    await expect(page.get_by_role("link", name="cli:alice")).to_have_count(0)
    await expect(page.get_by_role("link", name="cli:bob")).to_be_visible()
    assert app.knowledge.memories(alice) == []
