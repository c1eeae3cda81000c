"""A PostgreSQL outage under load: how many messages are held, how long after the database is back the last one
is answered, and whether any is answered twice or lost.

What runs: PostgreSQL and a Chroma server (started here, as the tests start them), the fake Bot API and
the fake LLM (threads of this process), and one app in server mode serving Telegram through its webhook,
in this process. Every user sends a message and gets its answer; then PostgreSQL is stopped at once
(`pg_ctl stop -m immediate`) for `--outage` seconds while every user sends one message every `--every`
seconds; then it is started again, and the clock runs until the last held message is answered.

    python -m bench.outage --users 50 --outage 30 --every 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
from pydantic import SecretStr

from bench.background import MODELS, role_settings
from bot.app import build_app
from bot.platforms.telegram.adapter import Webhook, run_telegram
from core import phrasebook
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import chat_history
from tests.fakes.telegram_server import TOKEN, FakeBotAPI
from tests.fakes.telegram_updates import person, text_update
from tests.servers import ChromaServer, PostgresServer, free_port

REPLY = "Noted."
WAIT_LIMIT = 600.0  # seconds: a run that answers nothing for this long has failed


async def until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT_LIMIT
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


async def run(args: argparse.Namespace) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="bench-outage-"))
    postgres = PostgresServer(survives_crashes=True).start()
    chroma = ChromaServer(root / "chroma").start()
    try:
        with FakeOpenAIServer() as llm, FakeBotAPI() as telegram:
            llm.set_default(MODELS["chat"], REPLY)
            llm.set_default(MODELS["monitor"], "[SKIP]")
            storage = {
                "data_dir": root / "data",
                "database_url": SecretStr(postgres.create_database("bench")),
                "chroma_host": "127.0.0.1",
                "chroma_port": chroma.port,
            }
            settings = role_settings(root / "data", llm.url).changed(storage=storage)
            app = await build_app(settings)
            port = free_port()
            webhook = Webhook(f"https://bench.invalid/telegram/{port}", "127.0.0.1", port)
            serving = asyncio.create_task(run_telegram(app.platform("telegram"), TOKEN, telegram.url, webhook=webhook))
            await until(lambda: telegram.calls_to("setWebhook"), "the webhook")
            await asyncio.sleep(0.5)
            users = [person(1000 + number, f"User {number}") for number in range(args.users)]
            sent: list[str] = []
            async with httpx.AsyncClient(timeout=30) as client:

                async def say_all(round_: int) -> None:
                    for user in users:
                        text = f"{user['first_name']} message {round_}"
                        sent.append(text)
                        update = text_update(text, user=user)
                        response = await client.post(f"http://127.0.0.1:{port}/telegram/{port}", json=update)
                        response.raise_for_status()

                def replies() -> int:
                    return telegram.sent_texts().count(REPLY)

                await say_all(0)
                await until(lambda: replies() == len(users), "the answers before the outage")
                print(f"{args.users} users; stopping PostgreSQL for {args.outage:.0f} s...", file=sys.stderr)
                await asyncio.to_thread(postgres.crash)
                stopped = time.perf_counter()
                rounds = 0
                while time.perf_counter() - stopped < args.outage:
                    rounds += 1
                    await say_all(rounds)
                    await asyncio.sleep(max(0.0, min(args.every, args.outage - (time.perf_counter() - stopped))))
                held = len(users) * rounds
                await asyncio.to_thread(postgres.restart)
                back = time.perf_counter()
                await until(lambda: replies() == len(sent), "every answer after the outage")
                recovered = time.perf_counter() - back
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
            await app.aclose()
            asked = Counter(chat_history(request)[-1] for request in llm.requests_for(MODELS["chat"]))
    finally:
        chroma.stop()
        postgres.stop()
    return {
        "users": args.users,
        "outage_s": args.outage,
        "messages_held": held,
        "holding_replies": telegram.sent_texts().count(phrasebook.HELD_UNTIL_BACK),
        "recovery_to_last_answer_s": round(recovered, 2),
        "answered_twice": sum(1 for text in sent if asked[text] > 1),
        "lost": sum(1 for text in sent if asked[text] == 0),
        "error_replies": telegram.sent_texts().count(phrasebook.SOMETHING_BROKE),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--outage", type=float, default=30.0, help="seconds PostgreSQL stays stopped")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between a user's messages in the outage")
    print(json.dumps(asyncio.run(run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
