"""`companion migrate`: an embedded data directory moved into server mode, checked by counting and by recall."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from zoneinfo import ZoneInfo

from click.testing import CliRunner
from pydantic import SecretStr

from bench.locomo import DEFAULT_DATA, REPO_ROOT, Sample, ask, ingest, load_samples, open_history, report_of
from bot.app import build_app
from bot.cli.main import cli
from bot.config import Settings
from bot.routing import PersonaChoices
from knowledge.journal.profiles import Profile
from knowledge.records import Scope
from knowledge.search.embedding import Embedder
from knowledge.sql.postgres import PostgresDatabase
from tests.bench.test_locomo import TOY
from tests.fakes.clock import FakeClock
from tests.servers import ChromaServer

ALICE = Scope("xiaoxiang", "cli:alice")


def locomo_conversation(tmp_path: Path, turns: int = 120) -> Sample:
    """The first `turns` turns of the first LoCoMo development conversation, with the questions they answer,
    where the data is beside the project; else the toy conversation."""
    path = REPO_ROOT / DEFAULT_DATA
    if not path.is_file():
        path = tmp_path / "toy.json"
        path.write_text(json.dumps(TOY), encoding="utf-8")
    samples, _ = load_samples(path)
    kept = samples[0].turns[:turns]
    said = {turn.dia_id for turn in kept}
    return replace(samples[0], turns=kept, questions=[q for q in samples[0].questions if q.evidence <= said])


def recall(where: Path | PostgresDatabase, sample: Sample, embedder: Embedder) -> dict[str, float]:
    working_memory, history = open_history(where, embedder)
    try:
        return report_of(ask(sample, history, []))["overall"]  # type: ignore[return-value]
    finally:
        history.close()
        working_memory.close()


async def test_migrate_round_trips_a_locomo_conversation_with_the_same_recall(
    settings: Settings,
    database_url: str,
    shared_chroma: ChromaServer,
    embedder: Embedder,
    clock: FakeClock,
    tmp_path: Path,
) -> None:
    sample = locomo_conversation(tmp_path)
    database = settings.storage.data_dir / "companion.sqlite3"
    app = await build_app(settings, clock=clock, embedder=embedder)  # the embedded data directory, as a bot left it
    app.companion.knowledge.add(ALICE, "Alice's cat is called Mochi", category="fact", source="user")
    app.journal.jobs.enqueue("monitor", ALICE, {"message_id": "msg_1"}, at=clock.now())
    app.companion.user_settings.set_time_zone(ALICE, ZoneInfo("Europe/Berlin"))
    person = app.links.join("cli:bob", "telegram:7", clock.now()).person_id  # linked identities stay one person
    portrait = Profile("Alice has a cat, Mochi.", ("mem_1",), "b", "background", clock.now())
    app.journal.profiles.write(ALICE, portrait, requested_at=clock.now())
    now = clock.now()
    app.journal.threads.open(ALICE, "thr_1", "move", "boxes", since=now, at=now, message_ids=["m"], place=None)
    await app.aclose()
    PersonaChoices(settings.storage.data_dir / "discord-personas.json").set(42, "xiaoxiang")
    working_memory, history = open_history(database, embedder)
    ingest(sample, working_memory, history)
    history.close()
    working_memory.close()
    embedded = recall(database, sample, embedder)

    target = ["migrate", "--to", database_url, "--chroma-host", "127.0.0.1", "--chroma-port", str(shared_chroma.port)]
    done = await asyncio.to_thread(CliRunner().invoke, cli, target)
    assert done.exit_code == 0, done.output
    assert "copied and verified" in done.output
    turns = len(sample.turns)
    counted = {line.split()[0]: line.split()[1:] for line in done.output.splitlines() if line[:1].isalpha()}
    assert counted["messages"] == [f"{turns:,}", f"{turns:,}"] and counted["memories"] == ["1", "1"]

    server = PostgresDatabase(database_url)
    try:
        on_server = recall(server, sample, embedder)
    finally:
        server.close()
    assert abs(on_server["recall@10"] - embedded["recall@10"]) <= 0.005
    assert abs(on_server["mrr"] - embedded["mrr"]) <= 0.005

    # the bots start on what was copied: the memory, the pending job and the /persona choice are there
    moved = await build_app(
        settings.changed(
            storage={
                "database_url": SecretStr(database_url),
                "chroma_host": "127.0.0.1",
                "chroma_port": shared_chroma.port,
            }
        ),
        clock=clock,
        embedder=embedder,
    )
    try:
        assert [record.content for record in moved.companion.knowledge.memories(ALICE)] == [
            "Alice's cat is called Mochi"
        ]
        assert [job.payload for job in moved.journal.jobs.pending_jobs()] == [{"message_id": "msg_1"}]
        assert moved.router("discord").persona_for([42]) == "xiaoxiang"
        assert moved.companion.user_settings.chosen_time_zone(ALICE) == "Europe/Berlin"
        assert moved.links.members(person) == ["cli:bob", "telegram:7"]
        assert moved.journal.profiles.get(ALICE) == portrait
        assert [thread.title for thread in moved.journal.threads.active(ALICE)] == ["move"]
        assert len(moved.working_memory.log.messages_of(Scope("locomo", f"locomo:{sample.sample_id}"))) == turns
        graph = moved.companion.knowledge._collection.configuration["hnsw"]
        assert (graph["max_neighbors"], graph["ef_construction"]) == (16, 100)  # chromadb's, not the embedded one's
    finally:
        await moved.aclose()

    again = await asyncio.to_thread(CliRunner().invoke, cli, target)
    assert again.exit_code != 0 and "already holds" in again.output  # never into a store in use
