"""PerChatUpdateProcessor: many chats answered at once, each chat's updates one at a time, in order.

python-telegram-bot processes updates one after another by default, so with many users every reply
waits for every earlier one. This processor runs the updates of different chats concurrently (at most
`max_running` handlers at once) and those of one chat strictly in the order they arrived, so a
conversation's messages are stored and answered in the order they were sent. A button press (callback
query) belongs to the chat of the message carrying the buttons, so it queues behind that chat's
messages. Updates without a chat (inline queries, polls) have no order to keep.

Each update with a chat is shown to `on_arrival` as it arrives, in order, saying whether it has to wait for its
chat's turn: a message that waits is kept in the spool file meanwhile (Telegram will not deliver it again: a crash
must not lose it). At a stop, the updates still waiting are handled at once in the pipeline's `stopping` mode:
their messages stay kept for the next start instead of answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from telegram import Update
from telegram.ext import BaseUpdateProcessor

from bot.ordering import TurnOrder
from bot.platforms.pipeline import stopping
from bot.platforms.telegram.places import chat_conversation

log = logging.getLogger(__name__)

# PTB's bot keeps 256 Bot API connections and gives up on a request that waits a second for one; a
# running update uses at most one at a time (typing, then the reply), so none of them ever waits.
DEFAULT_MAX_RUNNING = 256
# PTB takes a slot of its own bound *before* an update waits for its chat. Were that the running
# limit, one busy chat's backlog could fill every slot waiting for itself and stall all other chats,
# so PTB's bound only caps the updates held in memory and `max_running` is enforced after the wait.
MAX_HELD_UPDATES = 100_000


def chat_of(update: object) -> int | None:
    """The id of the chat whose order `update` keeps: a message's chat, or the chat of a button's message."""
    if isinstance(update, Update) and update.effective_chat is not None:
        return update.effective_chat.id
    return None


class PerChatUpdateProcessor(BaseUpdateProcessor):
    """Concurrent across chats, in arrival order within a chat; install with `concurrent_updates(...)`."""

    def __init__(
        self,
        max_running: int = DEFAULT_MAX_RUNNING,
        *,
        order: TurnOrder | None = None,
        on_arrival: Callable[[Update, bool], None] | None = None,
    ) -> None:
        """`order`: the chats' turn order (by default this process's only; in server mode, cluster-wide);
        `on_arrival`: told of each update with a chat as it arrives, and whether it has to wait for the chat's turn."""
        super().__init__(max_concurrent_updates=MAX_HELD_UPDATES)
        if max_running < 1:
            raise ValueError("max_running must be a positive integer")
        self._running = asyncio.Semaphore(max_running)
        self._order = TurnOrder() if order is None else order  # only chats with a turn running or waiting
        self._in_progress: set[asyncio.Task[Any]] = set()
        self._waiting: set[asyncio.Task[Any]] = set()  # not yet in their chat's turn
        self._stopping = False
        self._on_arrival = on_arrival

    @property
    def busy_chats(self) -> int:
        """How many chats have an update running or waiting."""
        return len(self._order)

    async def keep_waiting(self, within: float) -> int:
        """At a stop: handle the updates still waiting for their turn (and any arriving from now on) in `stopping`
        mode, which keeps their messages for the next start; wait up to `within` seconds for that. Returns how many."""
        self._stopping = True
        waiting = set(self._waiting)
        for task in waiting:
            task.cancel()
        if waiting:
            await asyncio.wait(waiting, timeout=within)
        return len(waiting)

    async def settle(self, within: float) -> None:
        """Wait up to `within` seconds for the updates running or waiting to end."""
        if self._in_progress:
            await asyncio.wait(set(self._in_progress), timeout=within)

    def abandon(self) -> int:
        """Cancel every update running or waiting (at shutdown: a hung model must not hold the process).

        A message is stored before its reply is generated, so an abandoned turn loses only the reply.
        Returns how many were abandoned.
        """
        for task in self._in_progress:
            task.cancel()
        return len(self._in_progress)

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._in_progress.add(task)
        try:
            await self._process_in_order(task, update, coroutine)
        finally:
            self._in_progress.discard(task)

    async def _process_in_order(self, task: asyncio.Task[Any], update: object, coroutine: Awaitable[Any]) -> None:
        if self._stopping:
            with stopping():
                await coroutine
            return
        chat_id = chat_of(update)
        # Turns are taken in the order PTB started the updates' tasks: the order they arrived.
        in_turn = self._order.turn(chat_conversation(chat_id)) if chat_id is not None else contextlib.nullcontext()
        if chat_id is not None:
            self._arrives(update, waits=self._order.busy(chat_conversation(chat_id)))
        self._waiting.add(task)
        try:
            async with in_turn, self._running:
                self._waiting.discard(task)
                await coroutine
        except asyncio.CancelledError:
            if task not in self._waiting:
                raise
            task.uncancel()  # cancelled by `keep_waiting` before its turn: kept, not answered
            with stopping():
                await coroutine
        finally:
            self._waiting.discard(task)

    def _arrives(self, update: object, *, waits: bool) -> None:
        if self._on_arrival is None or not isinstance(update, Update):
            return
        try:
            self._on_arrival(update, waits)
        except Exception:  # it is still answered in its turn; only a crash before that would lose it
            log.exception("an update could not be kept while it waits for its chat's turn")

    async def initialize(self) -> None:
        """Nothing to set up."""

    async def shutdown(self) -> None:
        """Nothing to release: PTB awaits the updates in progress when the application stops."""
