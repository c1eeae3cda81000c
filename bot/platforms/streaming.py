"""Replies that grow on a chat platform while the model writes them.

`stream_reply` reads the reply's stream and shows it on a `ReplySurface` (a Telegram draft, a message it
edits): no more often than the platform allows, cut at its length limit where `split_message` cuts a
whole reply, and always ending in the exact final text, which is also how a reply is sent with streaming
off. The model's stream is read to its end whatever the platform does, so the turn is stored (and handed
to the background) the same way however the reply was shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, Protocol, Self, TypeVar

from bot.platforms.render import first_chunk, units
from core import phrasebook

log = logging.getLogger(__name__)
Sent = TypeVar("Sent")  # a platform's sent message


class Timer(Protocol):
    """Seconds for pacing (monotonic) and a way to wait them; tests pass one that only pretends to wait."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicTimer:
    """The real timer."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ReplySurface(Protocol):
    """Where one reply appears on a platform. A long reply comes in parts: each is shown as it grows, then finished."""

    async def show(self, text: str) -> None:
        """The current part so far (a draft, or a message sent and then edited); may be skipped under flood limits."""

    async def finish(self, text: str) -> None:
        """The current part's final text, delivered for good; the next part starts a new message."""


class EditedMessages(ABC, Generic[Sent]):
    """A `ReplySurface` of messages edited as they grow: each part is sent with its first words, then edited
    whenever its text changed. A platform says how it sends and edits one part."""

    def __init__(self) -> None:
        self._sent: Sent | None = None
        self._text = ""  # what the sent part shows now
        self._parts = 0

    async def show(self, text: str) -> None:
        await self._grow(text, final=False)

    async def finish(self, text: str) -> None:
        await self._grow(text, final=True)
        self._sent = None

    async def _grow(self, text: str, *, final: bool) -> None:
        if self._sent is None:
            self._sent = await self._send(text, first=self._parts == 0)
            self._text = text
            self._parts += 1
        elif text != self._text and await self._edit(self._sent, text, final=final):
            self._text = text

    @abstractmethod
    async def _send(self, text: str, *, first: bool) -> Sent:
        """Send a new part (`first`: the reply's first) and return it."""

    @abstractmethod
    async def _edit(self, sent: Sent, text: str, *, final: bool) -> bool:
        """Show `text` in the part; False if the edit was skipped (a non-final one, under flood limits)."""


async def stream_reply(
    reply: AsyncIterator[str] | str,
    surface: ReplySurface,
    *,
    limit: int,
    interval: float | None,
    timer: Timer,
    on_visible: Callable[[], None] = lambda: None,
) -> str:
    """Show `reply` on `surface` as it grows, an update at most every `interval` seconds, and finish it at once.

    Over any span of `interval` x n seconds a reply makes at most n + 1 updates: the paced ones, and the
    final text, which goes as soon as the model is done. `interval` None shows nothing before the end
    (streaming off): each part is sent whole. `on_visible` is called once the first words are on the
    platform (to stop "typing…"). Returns the whole text.
    """
    presenter = _Presenter(surface, limit, interval, timer, on_visible)
    if isinstance(reply, str):
        presenter.text = reply
    else:
        await presenter.follow(reply)
    await presenter.deliver(final=True)
    return presenter.text


class _Presenter:
    """The state of one reply on its way: the text so far, where the current part starts, when it last changed."""

    def __init__(
        self, surface: ReplySurface, limit: int, interval: float | None, timer: Timer, on_visible: Callable[[], None]
    ) -> None:
        self.surface = surface
        self.limit = limit
        self.interval = interval
        self.timer = timer
        self.on_visible = on_visible
        self.text = ""
        self._finished = 0  # characters of `text` already delivered in finished parts
        self._shown = ""  # the current part as last shown
        self._last_update: float | None = None
        self._visible = False

    async def follow(self, reply: AsyncIterator[str]) -> None:
        """Read the stream to its end in a task of its own (a slow platform never slows the model's stream),
        showing the newest text whenever the pace allows."""
        changed = asyncio.Event()

        async def read() -> None:
            try:
                async for piece in reply:
                    self.text += piece
                    changed.set()
            except Exception:  # a failure in the turn itself: what was said stays, then an apology, never a draft
                log.exception("the reply's stream failed")
                self.text = self.text.rstrip() + "\n\n" + phrasebook.SOMETHING_BROKE

        reader = asyncio.create_task(read())  # owned: awaited below, whatever happens to the platform
        try:
            while self.interval is not None and not reader.done():
                await _first_of(reader, changed.wait())
                if not reader.done():
                    # wait for our turn; if the stream ends meanwhile, the final text goes instead of a frame
                    await _first_of(reader, self.timer.sleep(self._pause()))
                if reader.done():
                    break
                changed.clear()
                await self.deliver(final=False)
        except asyncio.CancelledError:
            reader.cancel()  # shutting down: the stream stops with us (the user's message is already stored)
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            raise
        except BaseException:
            await reader  # the turn is stored when its stream ends, even if showing it failed
            raise
        await reader

    async def deliver(self, *, final: bool) -> None:
        """Finish every part the text has filled, then show (or, at the end, finish) the part being written."""
        unfinished = self.text[self._finished :]
        start = self._finished + len(unfinished) - len(unfinished.lstrip())
        current = unfinished.strip()
        while units(current) > self.limit:
            part, after = first_chunk(current, self.limit)
            await self._update(self.surface.finish, part)
            start += len(current) - len(after)  # `after` is what follows the part, blanks at the cut dropped
            self._finished = start
            self._shown = ""
            current = after
        if not current:
            return
        if final:  # at once: the one update of a reply that does not wait its turn, so it ends when the model does
            await self._update(self.surface.finish, current, paced=False)
        elif current != self._shown:
            try:
                await self._update(self.surface.show, current)
            except Exception:  # a passing frame; the next one, or the final text, shows the same words
                log.warning("showing a reply as it grows failed", exc_info=True)
                return
            self._shown = current

    def _pause(self) -> float:
        """Seconds until the platform may be called again (`interval` after the previous call)."""
        if self.interval is None or self._last_update is None:
            return 0.0
        return max(self._last_update + self.interval - self.timer.now(), 0.0)

    async def _update(self, call: Callable[[str], Awaitable[None]], text: str, *, paced: bool = True) -> None:
        """One call to the platform, when `paced` no sooner than `interval` after the previous one."""
        if paced and (pause := self._pause()) > 0:
            await self.timer.sleep(pause)
        await call(text)
        self._last_update = self.timer.now()
        if not self._visible:
            self._visible = True
            self.on_visible()


async def _first_of(task: asyncio.Task[None], waiting: Awaitable[object]) -> None:
    """Wait until `task` is done or `waiting` is; the task goes on, an unfinished `waiting` is dropped."""
    other = asyncio.ensure_future(waiting)
    await asyncio.wait({task, other}, return_when=asyncio.FIRST_COMPLETED)
    other.cancel()


class Typing:
    """Shows "typing…" until the reply's first words are visible: at once, then every `refresh` seconds.

    Best effort: a failed typing action is logged and never costs the reply. `stop` ends it early
    (pass it as `stream_reply`'s `on_visible`); leaving the `async with` block always ends it.
    """

    def __init__(self, send: Callable[[], Awaitable[object]], *, refresh: float) -> None:
        self._send = send
        self._refresh = refresh
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._keep_typing())  # owned: cancelled and awaited on exit
        await asyncio.sleep(0)  # the first action leaves before any work on the reply
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.stop()
        if self._task is not None:
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _keep_typing(self) -> None:
        while True:
            try:
                await self._send()
            except Exception:  # "typing…" is decoration; the reply goes on without it
                log.warning("sending the typing action failed", exc_info=True)
            await asyncio.sleep(self._refresh)  # a real wait: refreshing is no pace a test needs to follow
