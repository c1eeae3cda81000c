"""`bench.concurrency` in server mode: N `companion run` processes behind one webhook proxy.

What runs: PostgreSQL and a Chroma server (started here, as the tests start them), the fake Bot API
and the fake LLM of `bench.concurrency` (threads of this process), and N real `companion run`
processes in server mode, each serving Telegram through its own webhook port. This process is the
proxy: it posts each update to the next process in turn, with no affinity, as a load balancer
would, so one user's messages land on every process. The users are `bench.concurrency`'s: each
waits for the reply to a message before sending the next; no think time unless asked.

Everything shares the machine's cores, so the CPU time each part used during the run is read from
/proc and reported with the figures (bots, PostgreSQL, Chroma, this process): what bounds the
throughput is where the CPU went. On N machines the bots' share spreads over N, while the
database and Chroma stay where they are.

    python -m bench.concurrency --processes 1,2,4 --users 100 --messages 5
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.background import MODELS
from bench.concurrency import Traffic, conversations, converse, report, tagged_chat
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_server import TOKEN, FakeBotAPI
from tests.servers import ChromaServer, PostgresServer, free_port

COMPANION = Path(sys.executable).with_name("companion")
TICKS = os.sysconf("SC_CLK_TCK")
READY_TIMEOUT = 120.0
DRAIN_TIMEOUT = 300.0


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) used so far by these processes."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def family(root: int) -> list[int]:
    """`root` and every process below it (PostgreSQL's backends, chroma's workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [root]
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue.extend(children.get(pid, []))
    return found


def bot_environment(index: int, port: int, data_dir: Path, urls: dict[str, str], chroma_port: int) -> dict[str, str]:
    """The environment of one `companion run` in server mode, serving Telegram through a webhook on `port`."""
    # the bench's own settings, but the operator's sizing of the connections (to compare sizes)
    kept = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("COMPANION_", "OPENAI_")) or key == "COMPANION_DATABASE_TURN_CONNECTIONS"
    }
    return {
        **kept,
        "COMPANION_DATA_DIR": str(data_dir / f"bot-{index}"),
        "COMPANION_LLM_BASE_URL": urls["llm"],
        "COMPANION_CHAT_MODEL": MODELS["chat"],
        "COMPANION_MONITOR_MODEL": MODELS["monitor"],
        "COMPANION_SUMMARIZER_MODEL": MODELS["summarizer"],
        "COMPANION_REVIEWER_MODEL": MODELS["reviewer"],
        "COMPANION_RATE_LIMIT_PER_MINUTE": "0",  # simulated users type far faster than people
        "COMPANION_TELEGRAM_TOKEN": TOKEN,
        "COMPANION_TELEGRAM_BASE_URL": urls["telegram"],
        "COMPANION_DATABASE_URL": urls["database"],
        "COMPANION_CHROMA_HOST": "127.0.0.1",
        "COMPANION_CHROMA_PORT": str(chroma_port),
        "COMPANION_TELEGRAM_WEBHOOK_URL": f"https://bench.invalid/telegram/{port}",
        "COMPANION_TELEGRAM_WEBHOOK_PORT": str(port),
    }


def start_bot(index: int, port: int, data_dir: Path, urls: dict[str, str], chroma_port: int) -> subprocess.Popen[bytes]:
    """`companion run` number `index`, its errors in bot-<index>.log of `data_dir`."""
    with open(data_dir / f"bot-{index}.log", "wb") as log:
        return subprocess.Popen(
            [str(COMPANION), "run"],
            env=bot_environment(index, port, data_dir, urls, chroma_port),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


class Proxy:
    """Posts each update to the next bot process's webhook, round robin."""

    def __init__(self, ports: list[int]) -> None:
        self._next = itertools.cycle(ports)
        self._client = httpx.AsyncClient(timeout=30)

    async def deliver(self, update: dict[str, Any]) -> None:
        port = next(self._next)
        response = await self._client.post(f"http://127.0.0.1:{port}/telegram/{port}", json=update)
        response.raise_for_status()

    async def aclose(self) -> None:
        await self._client.aclose()


async def run_processes(count: int, args: argparse.Namespace, postgres: PostgresServer, chroma: ChromaServer) -> dict:
    """One run with `count` bot processes on a fresh database; the figures of `bench.concurrency` plus CPU."""
    import chromadb
    import psycopg

    texts, roles = conversations(args)
    client = chromadb.HttpClient(host="127.0.0.1", port=chroma.port)
    if "memories" in {getattr(found, "name", found) for found in client.list_collections()}:
        client.delete_collection("memories")
    database = postgres.create_database(f"bench_{count}_{int(time.time())}")
    with (
        FakeOpenAIServer() as llm,
        FakeBotAPI() as telegram,
        tempfile.TemporaryDirectory(prefix="bench-cluster-") as data_dir,
    ):
        traffic = Traffic()
        roles.install(llm)
        llm.set_default(MODELS["chat"], tagged_chat(roles, traffic, args))
        llm.delay = args.llm_delay
        ports = [free_port() for _ in range(count)]
        urls = {"llm": llm.url, "telegram": telegram.url, "database": database}
        bots = [start_bot(index, port, Path(data_dir), urls, chroma.port) for index, port in enumerate(ports)]
        try:
            await wait_ready(telegram, ports, bots, Path(data_dir))
            traffic.listen_to(telegram)
            proxy = Proxy(ports)
            parts = {"bots": lambda: [pid for bot in bots for pid in family(bot.pid)]}
            parts["postgresql"] = lambda: family(postgres.pid)
            parts["chroma"] = lambda: family(chroma.pid)
            before = {name: cpu_seconds(pids()) for name, pids in parts.items()}
            here = time.process_time()
            print(f"{count} processes: {args.users} users x {args.messages} messages...", file=sys.stderr)
            started = time.perf_counter()
            await asyncio.gather(*(converse(proxy.deliver, traffic, user, said, args) for user, said in texts.items()))
            wall = time.perf_counter() - started
            drain_started = time.perf_counter()
            with psycopg.connect(database, autocommit=True) as db:
                dead_letters = await drained(db)
            drain = time.perf_counter() - drain_started
            cpu = {name: round(cpu_seconds(pids()) - before[name], 1) for name, pids in parts.items()}
            cpu["proxy and fakes (this process)"] = round(time.process_time() - here, 1)
            await proxy.aclose()
        finally:
            for bot in bots:
                bot.terminate()
            for bot in bots:
                bot.wait(timeout=60)
        monitor_calls = len(llm.requests_for(MODELS["monitor"]))
    figures = report(args, traffic, wall, drain, monitor_calls, dead_letters)
    return {"processes": count, **figures, "cpu_s": cpu, "cpu_s_per_answer": _per_answer(cpu, figures["answered"])}


async def wait_ready(telegram: FakeBotAPI, ports: list[int], bots: list[subprocess.Popen[bytes]], logs: Path) -> None:
    """Until every bot set its webhook (it is then serving it)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        serving = {int(call.params["url"].rsplit("/", 1)[1]) for call in telegram.calls_to("setWebhook")}
        if serving >= set(ports):
            await asyncio.sleep(0.5)  # set just before its server listens: let it bind
            return
        if any(bot.poll() is not None for bot in bots):
            break
        await asyncio.sleep(0.2)
    failed = "\n".join(path.read_text(errors="replace")[-1500:] for path in sorted(logs.glob("bot-*.log")))
    raise RuntimeError(f"the bot processes did not start:\n{failed}")


async def drained(db: Any) -> int:
    """Wait until no background job is pending anywhere; returns the dead letters."""
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while time.monotonic() < deadline:
        [(pending,)] = db.execute("SELECT COUNT(*) FROM jobs WHERE state = 'pending'").fetchall()
        if not pending:
            break
        await asyncio.sleep(0.2)
    [(letters,)] = db.execute("SELECT COUNT(*) FROM dead_letters").fetchall()
    return int(letters)


def _per_answer(cpu: dict[str, float], answered: int) -> dict[str, float]:
    return {name: round(seconds * 1000 / max(answered, 1), 1) for name, seconds in cpu.items()}


async def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every requested process count against the same servers, fresh data each time."""
    with tempfile.TemporaryDirectory(prefix="bench-servers-") as root:
        postgres = PostgresServer().start()
        chroma = ChromaServer(Path(root) / "chroma").start()
        try:
            return [await run_processes(count, args, postgres, chroma) for count in args.processes]
        finally:
            chroma.stop()
            postgres.stop()
