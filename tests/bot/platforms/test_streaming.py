"""Showing a reply as it grows: paced, cut at the platform's limit where whole replies are cut, exact at the end.

The platform here is a recording surface; the real platforms run the same code in test_telegram_adapter.py
and test_discord_adapter.py.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest

from bot.platforms.render import split_message, units
from bot.platforms.streaming import stream_reply
from core import phrasebook
from tests.fakes.clock import FakeTimer


@dataclass
class RecordingSurface:
    """What a platform was asked to do, with the (fake) time of each call."""

    timer: FakeTimer
    calls: list[tuple[str, str, float]] = field(default_factory=list)
    failing_shows: int = 0

    async def show(self, text: str) -> None:
        if self.failing_shows:
            self.failing_shows -= 1
            raise ConnectionError("a flaky network")
        self.calls.append(("show", text, self.timer.now()))

    async def finish(self, text: str) -> None:
        self.calls.append(("finish", text, self.timer.now()))

    def finished(self) -> list[str]:
        return [text for kind, text, _ in self.calls if kind == "finish"]

    def shown(self) -> list[str]:
        return [text for kind, text, _ in self.calls if kind == "show"]


async def pieces(words: Sequence[str], *, fail_after: int | None = None) -> AsyncIterator[str]:
    """A model's stream: one piece at a time, with other tasks running in between."""
    for index, word in enumerate(words):
        if index == fail_after:
            raise RuntimeError("the stream broke")
        await asyncio.sleep(0)
        yield word


async def test_the_reply_is_shown_as_it_grows_then_finished_exactly() -> None:
    timer = FakeTimer()
    surface = RecordingSurface(timer)
    words = [f"word{index} " for index in range(40)]
    visible: list[str] = []
    text = await stream_reply(
        pieces(words), surface, limit=4096, interval=1.0, timer=timer, on_visible=lambda: visible.append("yes")
    )
    assert text == "".join(words)
    assert surface.finished() == [text.strip()]
    shown = surface.shown()
    assert shown and shown[0] != text.strip()  # the first words go out before the model is done
    assert all(text.startswith(frame) for frame in shown) and len(set(shown)) == len(shown)
    assert visible == ["yes"]  # once


async def test_updates_never_come_closer_than_the_interval_but_the_final_text_goes_at_once() -> None:
    timer = FakeTimer()
    surface = RecordingSurface(timer)
    await stream_reply(pieces([f"w{index} " for index in range(200)]), surface, limit=100, interval=1.0, timer=timer)
    times = [at for _, _, at in surface.calls]
    assert len(times) > 3 and timer.waits  # several updates, and some had to wait for their turn
    *paced, final = times
    assert all(later - earlier >= 1.0 for earlier, later in itertools.pairwise(paced))
    assert final - paced[-1] < 1.0  # the end of the reply never waits for a frame's turn


async def test_a_reply_past_the_limit_goes_on_in_a_new_part_cut_where_the_whole_reply_would_be() -> None:
    timer = FakeTimer()
    surface = RecordingSurface(timer)
    paragraphs = [f"Paragraph {index}: " + "some words here. " * 4 for index in range(12)]
    words = [word + " " for word in "\n\n".join(paragraphs).split(" ")]
    text = await stream_reply(pieces(words), surface, limit=200, interval=0.5, timer=timer)
    assert surface.finished() == split_message(text, 200)
    assert all(units(frame) <= 200 for frame in surface.shown())


async def test_with_streaming_off_each_part_is_sent_whole_as_before() -> None:
    timer = FakeTimer()
    surface = RecordingSurface(timer)
    text = " ".join(f"word{index}" for index in range(500))
    await stream_reply(pieces([word + " " for word in text.split(" ")]), surface, limit=300, interval=None, timer=timer)
    assert [kind for kind, _, _ in surface.calls] == ["finish"] * len(split_message(text, 300))
    assert surface.finished() == split_message(text, 300)
    await stream_reply("already whole", surface, limit=300, interval=1.0, timer=timer)
    assert surface.finished()[-1] == "already whole"


async def test_a_broken_stream_ends_in_what_was_said_and_an_apology_not_in_a_draft() -> None:
    timer = FakeTimer()
    surface = RecordingSurface(timer)
    await stream_reply(
        pieces(["Hello ", "there, ", "friend"], fail_after=2), surface, limit=4096, interval=1.0, timer=timer
    )
    assert surface.calls[-1][0] == "finish"
    assert surface.finished() == [f"Hello there,\n\n{phrasebook.SOMETHING_BROKE}"]


async def test_a_frame_the_platform_refuses_costs_nothing_but_itself() -> None:
    timer = FakeTimer()
    surface = RecordingSurface(timer, failing_shows=2)
    text = await stream_reply(
        pieces(["one ", "two ", "three ", "four"]), surface, limit=4096, interval=0.1, timer=timer
    )
    assert surface.finished() == [text]


async def test_shutting_down_mid_reply_stops_the_models_stream_too() -> None:
    timer = FakeTimer()
    surface = RecordingSurface(timer)
    stopped = asyncio.Event()

    async def hanging() -> AsyncIterator[str]:
        try:
            yield "Let me think"
            await asyncio.Event().wait()  # a model that never finishes
            yield "never"
        finally:
            stopped.set()

    replying = asyncio.create_task(stream_reply(hanging(), surface, limit=4096, interval=1.0, timer=timer))
    while not surface.shown():
        await asyncio.sleep(0)
    replying.cancel()
    with pytest.raises(asyncio.CancelledError):
        await replying
    assert stopped.is_set()
