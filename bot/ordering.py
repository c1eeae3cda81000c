"""Turns in order: one at a time per conversation, in arrival order; different conversations run at once.

Where several bot processes serve the same conversations (Telegram webhooks behind one proxy), a
turn also holds the conversation's cluster-wide lock (`ClusterLocks.acquire`, first come first
served), so a turn received by one process waits for the turn another is answering. While the database
that keeps those locks is out of reach, a turn still runs in order in this process but without its lock:
`lock_out_of_reach()` tells it so, and it holds its message until the database is back instead of answering.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from knowledge.errors import StorageUnavailableError
from knowledge.sql.cluster import ClusterLocks, SingleProcess

_UNLOCKED: ContextVar[bool] = ContextVar("turn_lock_out_of_reach", default=False)


def lock_out_of_reach() -> bool:
    """Whether the running turn could not take its cluster-wide lock (the database is out of reach): another
    process may be answering the same conversation, so this turn must hold its message, not answer it."""
    return _UNLOCKED.get()


@dataclass
class _Queue:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiting: int = 0  # holding or waiting for the lock


class TurnOrder:
    """Per-key locks that exist only while someone holds or waits for them, so idle keys cost nothing."""

    def __init__(self, cluster: ClusterLocks | None = None) -> None:
        """`cluster`: the processes sharing the conversations (a key's text names it among them)."""
        self._queues: dict[Hashable, _Queue] = {}
        self._cluster = cluster or SingleProcess()
        self._away = False  # the last try to take a cluster lock found the database out of reach

    def __len__(self) -> int:
        """How many keys have a turn running or waiting."""
        return len(self._queues)

    def busy(self, key: Hashable) -> bool:
        """Whether a turn of `key` runs or waits in this process: one asked for now waits behind it."""
        return key in self._queues

    @asynccontextmanager
    async def turn(self, key: Hashable, *, retry: bool = False) -> AsyncIterator[None]:
        """Hold `key`'s turn. While the database is known to be out of reach its lock is not tried (each try
        waits for a connection), unless `retry`: a held message tries, and a success ends the wait for all."""
        # A free lock is taken without yielding and waiters are woken first come, first served,
        # so turns of one key run in the order they asked.
        queue = self._queues.setdefault(key, _Queue())
        queue.waiting += 1
        try:
            async with queue.lock, AsyncExitStack() as held:
                try:
                    if self._away and not retry:
                        raise StorageUnavailableError("the database was out of reach at the last try")
                    await held.enter_async_context(self._cluster.acquire(f"turn:{key}"))
                    self._away = False
                except StorageUnavailableError:
                    self._away = True
                held.callback(_UNLOCKED.reset, _UNLOCKED.set(self._away))
                yield
        finally:
            queue.waiting -= 1
            if not queue.waiting:
                del self._queues[key]
