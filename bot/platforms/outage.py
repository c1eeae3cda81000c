"""Riding out a database outage: messages that arrive while the database is out of reach wait here, in order.

Server mode keeps every message and every turn lock in PostgreSQL. While it is stopped, restarting or out
of reach, a message is not lost and not answered with an error: it is held in this process, its sender is
told once per outage that it will be answered, and every few seconds the oldest held message is tried
again. Once one goes through, the database is back: the rest follow, each conversation in the order its
messages arrived (conversations at once), and each is stored and answered once. An outage is logged when
it starts and when it ends, with its length and how many messages it held; no traceback.

What is still held when the process stops is handed to `at_stop` (the companion keeps it for the next start);
a crash loses it.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.ordering import TurnOrder
from core.types import ConversationRef, UserRef

log = logging.getLogger(__name__)

RETRY_SECONDS = 2.0  # how often a held message is tried again while the database is out of reach


@dataclass(frozen=True, slots=True)
class Held:
    """A message waiting for the database: `answer` stores and answers it, False if the database is still away."""

    number: int  # arrival order, across every conversation of the pipeline
    conversation: ConversationRef
    user: UserRef
    answer: Callable[[], Awaitable[bool]]
    keep: Callable[[], object]  # at a stop: keep it for the next start


class HeldMessages:
    """The messages held during one outage of the database, and the task that answers them once it is back."""

    def __init__(self, order: TurnOrder, *, retry: float = RETRY_SECONDS) -> None:
        """`order`: the platform's turn order, which every replayed turn takes like a new one."""
        self.order = order
        self._retry = retry
        self._numbers = itertools.count()
        self._held: list[Held] = []
        self._told: set[tuple[ConversationRef, UserRef]] = set()
        self._since = 0.0
        self._count = 0
        self._rider: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._held)

    @property
    def outage(self) -> bool:
        """Whether messages are being held: a new one waits behind them."""
        return self._rider is not None

    def number(self) -> int:
        """The next arrival's place in line (taken as a message arrives, before it waits for its turn)."""
        return next(self._numbers)

    def hold(self, held: Held, *, cause: str) -> bool:
        """Hold a message; True the first time its sender is told so during this outage."""
        if self._rider is None:
            log.warning("the database is out of reach (%s): holding messages until it is back", cause)
            self._since, self._count = time.monotonic(), 0
            # in a context of its own: not the turn's that found the database away
            self._rider = asyncio.create_task(self._ride_out(), name="outage", context=contextvars.Context())
        self._held.append(held)
        self._count += 1
        first = (held.conversation, held.user) not in self._told
        self._told.add((held.conversation, held.user))
        return first

    async def aclose(self) -> int:
        """At a stop: stop trying, and keep what is still held for the next start; returns how many."""
        if self._rider is not None:
            self._rider.cancel()
            await asyncio.gather(self._rider, return_exceptions=True)
            self._rider = None
        kept = sorted(self._held, key=lambda held: held.number)
        for held in kept:
            held.keep()
        if kept:
            log.warning("stopping during a database outage: %d held messages are kept for the next start", len(kept))
        self._held.clear()
        return len(kept)

    async def _ride_out(self) -> None:
        while self._held:
            await asyncio.sleep(self._retry)
            first = min(self._held, key=lambda held: held.number)
            if not await self._replay([first]):
                log.debug("the database is still out of reach; %d messages held", len(self._held))
                continue
            while self._held:  # held meanwhile, or after the first went through
                by_conversation: dict[ConversationRef, list[Held]] = {}
                for held in sorted(self._held, key=lambda held: held.number):
                    by_conversation.setdefault(held.conversation, []).append(held)
                if not all(await asyncio.gather(*map(self._replay, by_conversation.values()))):
                    break  # away again: wait and retry
        log.warning(
            "the database is back after %.0f s: %d messages were held, stored and answered in order",
            time.monotonic() - self._since,
            self._count,
        )
        self._told.clear()
        self._rider = None

    async def _replay(self, conversation: list[Held]) -> bool:
        """Answer one conversation's held messages in order; False when the database went away again."""
        for held in conversation:
            if not await held.answer():
                return False
            self._held.remove(held)
        return True
