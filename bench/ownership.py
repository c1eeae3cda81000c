"""What owning the data directory costs: a chat turn with the control socket listening, and a forwarded command.

* turn: `Companion.handle()` plus consuming the streamed reply (an app from `bot.app.build_app`, the
  real `OpenAIClient` against `tests.fakes.openai_server.FakeOpenAIServer` answering at once, the
  background off), timed in alternating blocks without and with the owner's control socket listening
  and its output routing installed, exactly as `companion run` has them. The ratio should be 1.0: the
  socket is idle until a command arrives.
* clean_text: the per-message text cleaning every adapter's `IncomingMessage` does, in microseconds.
* forwarded command: `memory list` sent over the control socket to the live app and answered (the
  client's own process start, about 1 s of Python imports, is not included).

Run from the repository root::

    python -m bench.ownership [--turns 200] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
import time
import timeit
from contextlib import nullcontext
from pathlib import Path

from bench.stats import cpu_model, summarize
from bot.app import App, build_app
from bot.cli.control_socket import ControlServer, send
from bot.cli.main import cli
from bot.cli.ownership import PROTOCOL, CommandRunner, serving_commands
from bot.config import Settings
from core.types import clean_text
from knowledge.search.embedding import load_embedder
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer

BLOCK = 10  # turns per block; blocks alternate between the socket off and on (ABBA)


async def _turns(app: App, count: int, *, listening: bool) -> list[float]:
    control = ControlServer(app.settings.storage.data_dir, CommandRunner(cli, app)) if listening else None
    timings = []
    with serving_commands() if listening else nullcontext():
        if control is not None:
            await control.start()
        try:
            for index in range(count):
                began = time.perf_counter()
                await (await app.companion.handle(make_message(f"what did I say about tea, #{index}?"))).text()
                timings.append((time.perf_counter() - began) * 1000)
        finally:
            if control is not None:
                await control.aclose()
    return timings


async def _forwarded(app: App, count: int) -> list[float]:
    control = ControlServer(app.settings.storage.data_dir, CommandRunner(cli, app))
    request = {"protocol": PROTOCOL, "command": ["memory", "list"], "params": {"user_name": "alice", "as_json": True}}
    timings = []
    with serving_commands():
        await control.start()
        try:
            for _ in range(count):
                began = time.perf_counter()
                answer = await asyncio.to_thread(send, app.settings.storage.data_dir, request)
                timings.append((time.perf_counter() - began) * 1000)
                assert answer is not None and answer["exit_code"] == 0, answer
        finally:
            await control.aclose()
    return timings


async def run(turns: int) -> dict[str, object]:
    with FakeOpenAIServer() as fake, tempfile.TemporaryDirectory() as directory:
        fake.set_default("chat-model", "Green tea, you said.")
        settings = Settings(
            storage={"data_dir": Path(directory)},
            llm={"base_url": fake.url, "chat_model": "chat-model"},
            rate_limit_per_minute=0,
        )
        app = await build_app(settings, embedder=load_embedder("auto"), background=False)
        try:
            await _turns(app, 20, listening=False)  # warm-up
            off: list[float] = []
            on: list[float] = []
            for block in range(max(1, turns // (2 * BLOCK))):
                # ABBA order: the conversation grows as the run goes on, and neither side may always come last
                for listening in (False, True) if block % 2 == 0 else (True, False):
                    (on if listening else off).extend(await _turns(app, BLOCK, listening=listening))
            forwarded = await _forwarded(app, 50)
        finally:
            await app.aclose()
    texts = {
        "ascii": "what did I say about tea?",
        "cjk": "主人昨天说喜欢拉面吗？",
        "broken": "bad \udcff\udcfe emoji \ud83d",
    }
    cleaning = {
        name: timeit.timeit(lambda t=text: clean_text(t), number=20000) / 20000 * 1e6 for name, text in texts.items()
    }
    turn_off, turn_on = summarize(off), summarize(on)
    return {
        "turn_ms_socket_off": turn_off,
        "turn_ms_socket_on": turn_on,
        "turn_p50_ratio_on_off": round(turn_on["p50"] / turn_off["p50"], 3),
        "clean_text_us": {name: round(value, 2) for name, value in cleaning.items()},
        "forwarded_memory_list_ms": summarize(forwarded),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200, help="timed turns, half with the socket listening")
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    figures = asyncio.run(run(args.turns))
    print(f"CPU: {cpu_model()}")
    for name, value in figures.items():
        print(f"{name:>28}: {value}")
    if args.json:
        print(json.dumps({"benchmark": "ownership", "cpu": cpu_model(), **figures}))


if __name__ == "__main__":
    main()
