"""PerChatUpdateProcessor: many chats answered at once, each chat's updates one at a time, in order.

python-telegram-bot processes updates one after another by default, so with many users every reply
waits for every earlier one. This processor runs the updates of different chats concurrently (at most
`max_running` handlers at once) and those of one chat strictly in the order they arrived, so a
conversation's messages are stored and answered in the order they were sent. A button press (callback
query) belongs to the chat of the message carrying the buttons, so it queues behind that chat's
messages. Updates without a chat (inline queries, polls) have no order to keep.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from telegram import Update
from telegram.ext import BaseUpdateProcessor

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


@dataclass
class _ChatQueue:
    """One chat's turn: the lock its updates take in arrival order, and how many hold or wait for it."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    updates: int = 0


class PerChatUpdateProcessor(BaseUpdateProcessor):
    """Concurrent across chats, in arrival order within a chat; install with `concurrent_updates(...)`."""

    def __init__(self, max_running: int = DEFAULT_MAX_RUNNING) -> None:
        super().__init__(max_concurrent_updates=MAX_HELD_UPDATES)
        if max_running < 1:
            raise ValueError("max_running must be a positive integer")
        self._running = asyncio.Semaphore(max_running)
        # Only chats with an update running or waiting: a chat's entry goes when its last update is done.
        self._chats: dict[int, _ChatQueue] = {}

    @property
    def busy_chats(self) -> int:
        """How many chats have an update running or waiting."""
        return len(self._chats)

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        chat_id = chat_of(update)
        if chat_id is None:
            async with self._running:
                await coroutine
            return
        # Taking the lock does not yield when it is free, and waiters are woken first come, first served,
        # so updates of one chat run in the order PTB started their tasks: the order they arrived.
        queue = self._chats.setdefault(chat_id, _ChatQueue())
        queue.updates += 1
        try:
            async with queue.lock, self._running:
                await coroutine
        finally:
            queue.updates -= 1
            if not queue.updates:
                del self._chats[chat_id]

    async def initialize(self) -> None:
        """Nothing to set up."""

    async def shutdown(self) -> None:
        """Nothing to release: PTB awaits the updates in progress when the application stops."""
