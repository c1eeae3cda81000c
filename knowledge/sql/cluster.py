"""What processes sharing one store agree on: locks by name, who is alive, and how often each scope was forgotten.

Embedded (the default), one process owns the data directory, so the in-process locks the callers
already take are all the exclusion there is: `SingleProcess` grants everything at once and knows
that every worker but itself is gone. In server mode `PostgresCluster` (`postgres.py`) answers the
same questions with PostgreSQL advisory locks, which the server releases when a process dies.

Names are strings (`turn:telegram:-1001`, `jobs:xiaoxiang/telegram:7`); what they mean is the
caller's business.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, contextmanager
from typing import Protocol

from knowledge.records import Scope


class ClusterLocks(Protocol):
    """Named locks held across every process of a deployment, and each process's liveness."""

    @property
    def worker_id(self) -> str:
        """This process's name among the workers (held while it runs)."""
        ...

    def hold(self, name: str) -> AbstractContextManager[None]:
        """Hold `name`, waiting for it (from a worker thread: it blocks)."""
        ...

    def acquire(self, name: str) -> AbstractAsyncContextManager[None]:
        """Hold `name`, waiting for it without blocking the event loop; waiters get it first come, first served."""
        ...

    def try_acquire(self, name: str) -> AbstractAsyncContextManager[bool]:
        """Hold `name` if nobody does (True), else go on at once (False)."""
        ...

    def alive(self, worker_id: str) -> bool:
        """Whether the worker named is still running (asked about itself: yes, and it makes sure the others see
        it so, after a server restart too)."""
        ...

    async def aclose(self) -> None:
        """Release every lock and connection."""
        ...


class ForgetLedger(Protocol):
    """Forgets numbered in the order they happened, and each scope's last one (for the forget fence)."""

    def count(self) -> int:
        """How many forgets have happened so far."""
        ...

    def record(self, scope: Scope) -> int:
        """Number a forget of `scope` that is starting; returns its number."""
        ...

    def last(self, scope: Scope) -> int:
        """The number of the scope's last forget (0: never)."""
        ...


class SingleProcess:
    """`ClusterLocks` for one process alone: nothing to wait for, nobody else alive."""

    def __init__(self) -> None:
        self._worker_id = f"worker_{uuid.uuid4().hex[:12]}"

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @contextmanager
    def hold(self, name: str) -> Iterator[None]:
        yield

    @asynccontextmanager
    async def acquire(self, name: str) -> AsyncIterator[None]:
        yield

    @asynccontextmanager
    async def try_acquire(self, name: str) -> AsyncIterator[bool]:
        yield True

    def alive(self, worker_id: str) -> bool:
        return worker_id == self._worker_id

    async def aclose(self) -> None:
        """Nothing is held."""


class LocalForgetLedger:
    """`ForgetLedger` of one process, in memory: a restart forgets it, and no job survives a restart running."""

    def __init__(self) -> None:
        self._forgets = 0
        self._last: dict[Scope, int] = {}

    def count(self) -> int:
        return self._forgets

    def record(self, scope: Scope) -> int:
        self._forgets += 1
        self._last[scope] = self._forgets
        return self._forgets

    def last(self, scope: Scope) -> int:
        return self._last.get(scope, 0)
