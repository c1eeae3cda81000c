"""Turns in order: one at a time per conversation, in arrival order; different conversations run at once.

Where several bot processes serve the same conversations (Telegram webhooks behind one proxy), a
turn also holds the conversation's cluster-wide lock (`ClusterLocks.acquire`, first come first
served), so a turn received by one process waits for the turn another is answering.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from knowledge.sql.cluster import ClusterLocks, SingleProcess


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

    def __len__(self) -> int:
        """How many keys have a turn running or waiting."""
        return len(self._queues)

    @asynccontextmanager
    async def turn(self, key: Hashable) -> AsyncIterator[None]:
        # A free lock is taken without yielding and waiters are woken first come, first served,
        # so turns of one key run in the order they asked.
        queue = self._queues.setdefault(key, _Queue())
        queue.waiting += 1
        try:
            async with queue.lock, self._cluster.acquire(f"turn:{key}"):
                yield
        finally:
            queue.waiting -= 1
            if not queue.waiting:
                del self._queues[key]
