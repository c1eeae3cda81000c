"""The console over a real app: who may see what, what the API and the pages show, and what they change."""

from __future__ import annotations

import re
import stat

import httpx
import pytest
from pydantic import SecretStr

from bot.app import App
from bot.config import Settings
from bot.console.access import FAILED_LOGIN_WINDOW, FAILED_LOGINS, TOKEN_FILE, operator_token
from knowledge.journal.profiles import Profile
from knowledge.records import Scope
from tests.bot.console.conftest import BEARER, SCRIPT, TOKEN, Clock, seed
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT

ALICE_FACT = "Alice is saving for a trip to Lisbon"

# Every route a stranger might try, with what it would need to do harm.
ROUTES = [
    ("GET", "/"),
    ("GET", "/?q=alice"),
    ("GET", "/memories?persona=xiaoxiang&user=cli:alice"),
    ("GET", "/api/scopes"),
    ("GET", "/usage"),
    ("POST", "/privacy-check"),
    ("POST", "/api/privacy-check"),
    ("GET", "/api/usage"),
    ("GET", "/api/quota?persona=xiaoxiang&user=cli:alice"),
    ("GET", "/replies?persona=xiaoxiang&user=cli:alice"),
    ("GET", "/api/replies?persona=xiaoxiang&user=cli:alice"),
    ("GET", "/api/memories?persona=xiaoxiang&user=cli:alice"),
    ("GET", "/api/profile?persona=xiaoxiang&user=cli:alice"),
    ("PATCH", "/api/memories/{id}?persona=xiaoxiang&user=cli:alice"),
    ("DELETE", "/api/memories/{id}?persona=xiaoxiang&user=cli:alice"),
    ("DELETE", "/api/scopes?persona=xiaoxiang&user=cli:alice"),
    ("POST", "/memories/{id}/edit"),
    ("POST", "/memories/{id}/forget"),
    ("POST", "/forget-user"),
]


async def log_in(client: httpx.AsyncClient, token: str = TOKEN) -> httpx.Response:
    return await client.post("/login", data={"token": token})


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found[1]


async def test_a_stranger_gets_nothing_but_the_health_check(app: App, client: httpx.AsyncClient, alice: Scope) -> None:
    [memory_id] = seed(app, alice, "Alice", ALICE_FACT)
    assert (await client.get("/healthz")).text == "ok"
    for method, path in ROUTES:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"cookie": "companion_console=forged"}):
            response = await client.request(method, path.format(id=memory_id), headers=headers, json={"content": "x"})
            assert response.status_code in (303, 401), (method, path, headers)
            assert "Lisbon" not in response.text and "alice" not in response.text
    assert [record.content for record in app.knowledge.memories(alice)] == [ALICE_FACT]


async def test_the_api_lists_users_and_their_memories_with_history(
    app: App, client: httpx.AsyncClient, alice: Scope, bob: Scope
) -> None:
    seed(app, alice, "Alice", ALICE_FACT)
    seed(app, bob, "Bob", "Bob keeps bees", "Bob plays the oboe")
    listed = (await client.get("/api/scopes", headers=BEARER)).json()
    assert {(row["user_id"], row["user_name"], row["messages"]) for row in listed} == {
        ("cli:alice", "Alice", 1),
        ("cli:bob", "Bob", 1),
    }
    found = (await client.get("/api/scopes?q=BO", headers=BEARER)).json()  # any case, by name or id
    assert [row["user_id"] for row in found] == ["cli:bob"]
    memories = (await client.get("/api/memories?persona=xiaoxiang&user=cli:bob", headers=BEARER)).json()
    assert sorted(memory["content"] for memory in memories) == ["Bob keeps bees", "Bob plays the oboe"]
    assert all(memory["history"] == [] and memory["category"] == "fact" for memory in memories)


async def test_a_linked_person_is_listed_with_every_identity_they_speak_from(
    app: App, client: httpx.AsyncClient, alice: Scope
) -> None:
    seed(app, alice, "Alice", ALICE_FACT)
    joining = app.links.join("cli:alice", "telegram:7", app.clock.now())
    await app.companion.join(joining)
    person = Scope(alice.persona_id, joining.person_id)
    [listed] = (await client.get("/api/scopes", headers=BEARER)).json()
    assert listed["user_id"] == person.user_id and listed["identities"] == ["cli:alice", "telegram:7"]
    await log_in(client)
    page = (await client.get("/memories", params={"persona": person.persona_id, "user": person.user_id})).text
    assert "One person on 2 accounts" in page and "cli:alice, telegram:7" in page and "Lisbon" in page
    alone = (await client.get("/memories", params={"persona": "xiaoxiang", "user": "cli:bob"})).text
    assert "One person" not in alone


async def test_a_users_page_shows_their_profile_threads_and_chapters_escaped(
    app: App, client: httpx.AsyncClient, alice: Scope, bob: Scope
) -> None:
    seed(app, alice, "Alice", ALICE_FACT)
    seed(app, bob, "Bob", "Bob keeps bees")
    now = app.clock.now()
    portrait = Profile(f"Alice saves for Lisbon {SCRIPT}", (), "", "operator", now)
    app.journal.profiles.write(alice, portrait, requested_at=None)
    app.journal.threads.open(
        alice, "thr_1", "the move", "boxes packed", since=now, at=now, message_ids=["m"], place=None
    )
    app.knowledge.add(alice, "[March 2027] Alice planned the trip", category="chapter", source="summary")
    listed = (await client.get("/api/profile?persona=xiaoxiang&user=cli:alice", headers=BEARER)).json()
    assert listed["profile"]["text"] == portrait.text and [t["title"] for t in listed["threads"]] == ["the move"]
    memories = (await client.get("/api/memories?persona=xiaoxiang&user=cli:alice", headers=BEARER)).json()
    assert "chapter" in {memory["category"] for memory in memories}
    assert (await client.get("/api/profile?persona=xiaoxiang&user=cli:bob", headers=BEARER)).json() == {
        "profile": None,
        "threads": [],
    }
    await log_in(client)
    page = (await client.get("/memories", params={"persona": "xiaoxiang", "user": "cli:alice"})).text
    assert "boxes packed" in page and "Alice planned the trip" in page and "Alice saves for Lisbon" in page
    assert SCRIPT not in page  # the profile's text is escaped like every text a user shaped
    chapter_row = page.split("Alice planned the trip", 1)[1].split("</tr>", 1)[0]
    assert 'name="category"' not in chapter_row  # a chapter is not turned into another category by a save


async def test_an_edit_through_the_api_is_logged_as_the_console_and_kept_to_its_scope(
    app: App, client: httpx.AsyncClient, alice: Scope, bob: Scope
) -> None:
    [memory_id] = seed(app, alice, "Alice", ALICE_FACT)
    seed(app, bob, "Bob", "Bob keeps bees")
    path = f"/api/memories/{memory_id}?persona=xiaoxiang&user=cli:alice"
    edited = await client.patch(path, headers=BEARER, json={"content": "Alice is saving for Porto", "importance": 2})
    assert edited.status_code == 200 and edited.json()["content"] == "Alice is saving for Porto"
    [change] = app.journal.changes.changes(alice, memory_id)
    assert (change.actor, change.old_content, change.new_content) == (
        "console",
        ALICE_FACT,
        "Alice is saving for Porto",
    )
    history = (await client.get("/api/memories?persona=xiaoxiang&user=cli:alice", headers=BEARER)).json()[0]["history"]
    assert [(entry["actor"], entry["old_content"]) for entry in history] == [("console", ALICE_FACT)]
    elsewhere = f"/api/memories/{memory_id}?persona=xiaoxiang&user=cli:bob"  # Alice's memory asked as Bob's
    assert (await client.patch(elsewhere, headers=BEARER, json={"content": "hijacked"})).status_code == 404
    assert (await client.delete(elsewhere, headers=BEARER)).status_code == 404
    for bad in ({"content": "  "}, {"importance": "lots"}, {"category": "secret"}, ["content"]):
        assert (await client.patch(path, headers=BEARER, json=bad)).status_code == 400
    assert [record.content for record in app.knowledge.memories(alice)] == ["Alice is saving for Porto"]


async def test_forgetting_one_memory_and_then_the_whole_user(
    app: App, client: httpx.AsyncClient, alice: Scope, bob: Scope
) -> None:
    lisbon, _ = seed(app, alice, "Alice", ALICE_FACT, "Alice has a cat")
    seed(app, bob, "Bob", "Bob keeps bees")
    forgot = await client.delete(f"/api/memories/{lisbon}?persona=xiaoxiang&user=cli:alice", headers=BEARER)
    assert forgot.json()["memories"] == 1
    assert [record.content for record in app.knowledge.memories(alice)] == ["Alice has a cat"]
    assert await client.delete("/api/scopes?persona=xiaoxiang&user=cli:alice", headers=BEARER)
    assert app.knowledge.memories(alice) == [] and app.working_memory.log.count(alice) == 0
    assert [row["user_id"] for row in (await client.get("/api/scopes", headers=BEARER)).json()] == ["cli:bob"]
    unknown = await client.get("/api/memories?persona=nobody&user=cli:bob", headers=BEARER)
    assert unknown.status_code == 404


async def test_the_replies_show_what_was_in_their_prompt_in_their_own_scope(
    app: App, client: httpx.AsyncClient, fake_openai: FakeOpenAIServer, alice: Scope, bob: Scope
) -> None:
    seed(app, alice, "Alice", ALICE_FACT)
    seed(app, bob, "Bob", "Bob keeps bees")
    fake_openai.set_default(CHAT, "Lisbon, I think!")
    await (await app.companion.handle(make_message("what am I saving for?"))).text()
    [reply] = (await client.get("/api/replies?persona=xiaoxiang&user=cli:alice", headers=BEARER)).json()
    assert [memory["content"] for memory in reply["memories"]] == [ALICE_FACT]
    assert [said["content"] for said in reply["exchange"]] == ["what am I saving for?", "Lisbon, I think!"]
    assert reply["model"] == "chat-model" and reply["prompt_tokens"] > 0 and reply["gone"] == 0
    assert (await client.get("/api/replies?persona=xiaoxiang&user=cli:bob", headers=BEARER)).json() == []


async def test_token_use_is_counted_per_day_user_and_model_with_its_cost(
    app: App, client: httpx.AsyncClient, fake_openai: FakeOpenAIServer, alice: Scope
) -> None:
    app.settings = app.settings.changed(usage={"prices": {"chat-model": (1.0, 2.0)}})  # per million tokens
    fake_openai.set_default(CHAT, "Hello there!")
    for text in ("hi", "how are you?"):
        await (await app.companion.handle(make_message(text))).text()
    [row] = (await client.get("/api/usage", headers=BEARER)).json()
    assert (row["user_id"], row["model"], row["replies"], row["day"]) == ("cli:alice", "chat-model", 2, "2026-01-03")
    assert row["cost"] == round((row["prompt_tokens"] + 2 * row["completion_tokens"]) / 1e6, 6) > 0
    quota = (await client.get("/api/quota?persona=xiaoxiang&user=cli:alice", headers=BEARER)).json()
    assert quota == {"tokens_today": row["prompt_tokens"] + row["completion_tokens"], "daily_tokens": None}
    await log_in(client)
    assert "chat-model" in (await client.get("/usage")).text


async def test_the_browser_logs_in_to_a_strict_http_only_cookie_and_forms_need_their_csrf_token(
    app: App, client: httpx.AsyncClient, alice: Scope
) -> None:
    [memory_id] = seed(app, alice, "Alice", ALICE_FACT)
    assert (await client.get("/")).headers["location"] == "/login"
    assert (await log_in(client, "wrong")).status_code == 401
    logged_in = await log_in(client)
    assert logged_in.status_code == 303
    cookie = logged_in.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    page = await client.get("/memories?persona=xiaoxiang&user=cli:alice")
    assert ALICE_FACT in page.text and page.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    form = {"persona": "xiaoxiang", "user": "cli:alice", "content": "Alice is saving for Porto", "category": "fact"}
    for forged in ({}, {"csrf": "guessed"}):
        assert (await client.post(f"/memories/{memory_id}/edit", data={**form, **forged})).status_code == 403
    api_without_header = await client.delete(f"/api/memories/{memory_id}?persona=xiaoxiang&user=cli:alice")
    assert api_without_header.status_code == 403
    assert [record.content for record in app.knowledge.memories(alice)] == [ALICE_FACT]
    saved = await client.post(f"/memories/{memory_id}/edit", data={**form, "csrf": csrf_of(page.text)})
    assert saved.status_code == 303 and "done=edited" in saved.headers["location"]
    assert [record.content for record in app.knowledge.memories(alice)] == ["Alice is saving for Porto"]
    await client.post("/logout", data={"csrf": csrf_of(page.text)})
    assert (await client.get("/memories?persona=xiaoxiang&user=cli:alice")).status_code == 303


async def test_failed_logins_are_held_back_until_the_window_passes(client: httpx.AsyncClient, seconds: Clock) -> None:
    for _ in range(FAILED_LOGINS):
        assert (await log_in(client, "guess")).status_code == 401
    held = await log_in(client)  # even the right token waits: guessing must not go on
    assert held.status_code == 429 and "Too many failed logins" in held.text
    seconds.at += FAILED_LOGIN_WINDOW + 1
    assert (await log_in(client)).status_code == 303


async def test_what_users_wrote_is_escaped_everywhere(app: App, client: httpx.AsyncClient) -> None:
    mallory = Scope("xiaoxiang", "cli:mallory")
    seed(app, mallory, SCRIPT, f"likes {SCRIPT}")
    await log_in(client)
    pages = [
        await client.get("/"),
        await client.get(f"/?q={SCRIPT}"),
        await client.get("/memories?persona=xiaoxiang&user=cli:mallory"),
    ]
    for page in pages:
        assert "<script" not in page.text and "&lt;script&gt;" in page.text


def test_the_token_is_made_once_owner_only_and_the_environment_wins(settings: Settings) -> None:
    token, new = operator_token(settings)
    path = settings.storage.data_dir / TOKEN_FILE
    assert new and len(token) >= 40 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert operator_token(settings) == (token, False)
    assert operator_token(settings.changed(web={"token": SecretStr("from-env")})) == ("from-env", False)


@pytest.mark.parametrize("name", ["COMPANION_WEB_TOKEN", "COMPANION_WEB_PORT", "COMPANION_WEB_HOST"])
def test_the_console_settings_are_read_from_the_environment(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "8080")
    web = Settings().web
    assert {"COMPANION_WEB_TOKEN": web.token and web.token.get_secret_value(), "COMPANION_WEB_PORT": web.port}.get(
        name, web.host
    ) in ("8080", 8080)


async def test_dead_letters_are_listed_retried_or_discarded_and_check_ins_shown(
    app: App, client: httpx.AsyncClient, alice: Scope
) -> None:
    unreadable = app.journal.jobs.dead_letter("monitor", alice, {"output": "?"}, "unreadable", at=app.clock.now())
    work = (await client.get("/api/work", headers=BEARER)).json()
    assert [(letter["id"], letter["user_id"]) for letter in work["dead_letters"]] == [(unreadable.id, "cli:alice")]
    assert work["checkins"] == [] and work["pending"] == []
    # the monitor's unreadable answer is kept to be read, not rerun
    assert (await client.post(f"/api/dead-letters/{unreadable.id}/retry", headers=BEARER)).status_code == 404
    assert (await client.delete(f"/api/dead-letters/{unreadable.id}", headers=BEARER)).status_code == 200
    assert (await client.delete(f"/api/dead-letters/{unreadable.id}", headers=BEARER)).status_code == 404
    assert app.journal.jobs.dead_letters() == []


async def test_the_background_page_says_how_long_the_oldest_job_waited_and_when_it_is_behind(
    app: App, client: httpx.AsyncClient, alice: Scope, clock: FakeClock
) -> None:
    app.journal.jobs.enqueue("monitor", alice, {}, at=clock.now(), held_by="another process")  # waits, unclaimed
    clock.advance(minutes=4)
    assert (await client.get("/api/work", headers=BEARER)).json()["backlog"] == {
        "pending": 1,
        "oldest_waiting_seconds": 240.0,
        "warning_past_seconds": 600.0,
        "behind": False,
    }
    clock.advance(minutes=8)
    await log_in(client)
    page = (await client.get("/work")).text
    assert "1 waiting, the oldest for 12.0 min: behind, memory is written late" in page


async def test_the_privacy_check_finds_a_text_until_it_is_forgotten(
    app: App, client: httpx.AsyncClient, alice: Scope
) -> None:
    [memory_id] = seed(app, alice, "Alice", "Alice's locker code is QX-5521")
    found = (await client.post("/api/privacy-check", headers=BEARER, json={"text": "QX-5521"})).json()
    assert not found["clean"] and found["scanned"] > 0 and any("embedding" in place for place in found["in_rows"])
    await client.delete(f"/api/memories/{memory_id}?persona=xiaoxiang&user=cli:alice", headers=BEARER)
    await app.compact_vectors()
    assert (await client.post("/api/privacy-check", headers=BEARER, json={"text": "QX-5521"})).json()["clean"]
    assert (await client.post("/api/privacy-check", headers=BEARER, json={"text": " "})).status_code == 400
    await log_in(client)
    page = await client.get("/privacy-check")
    checked = await client.post("/privacy-check", data={"text": "QX-5521", "csrf": csrf_of(page.text)})
    assert "Not found anywhere" in checked.text
