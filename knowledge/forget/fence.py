"""The forget fence: background work that began before a forget cannot write into the forgotten scope.

A monitor job reads a turn, asks its model, then writes; a `/forget` may land in between. Without a
fence the job would write back what was just forgotten (a memory, a change-log row, a dead letter
quoting the turn). So the fence counts forgets, the job runner gives each job a ticket of
the count when it started (a context variable, so it follows the job into worker threads), and the
stores check the ticket inside `fenced_write`: a write to a scope forgotten since the ticket raises
`ScopeForgottenError` before anything is written, and the runner then re-runs the job from what the
forget left of it (or drops it, if the forget erased it). Check and write happen under the scope's
lock, which the forget holds while it deletes, so no write slips in between.

Work without a ticket (a chat turn storing its message, an operator's command, the decay pass) is not
fenced: it does not act on a stale view of the scope.

Where several processes share the stores (server mode) the fence spans them: forgets are numbered in
the shared database (`ForgetLedger`) and the scope's lock is also a cluster-wide lock (`ClusterLocks`),
so a `/forget` in one process stops a job of the scope running in another just the same.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass

from knowledge.records import Scope
from knowledge.sql.cluster import ClusterLocks, ForgetLedger, LocalForgetLedger, SingleProcess


class ScopeForgottenError(Exception):
    """The scope was forgotten after this work began; it must not write what it read before."""


@dataclass(slots=True)
class _Ticket:
    fence: ForgetFence
    admitted: int  # the fence's forget count when the job started


_TICKET: ContextVar[_Ticket | None] = ContextVar("forget_ticket", default=None)


class ForgetFence:
    """When each scope was last forgotten, and the locks that order forgets and writes."""

    def __init__(self, ledger: ForgetLedger | None = None, cluster: ClusterLocks | None = None) -> None:
        """`ledger` and `cluster`: where forgets are counted and scopes locked; by default in this process only."""
        self._ledger = ledger or LocalForgetLedger()
        self._cluster = cluster or SingleProcess()
        self._guard = threading.Lock()
        self._locks: dict[Scope, _ScopeLock] = {}

    def admit(self) -> Token[_Ticket | None]:
        """Give the current context (a background job) a ticket: it may write what it reads from now on."""
        return _TICKET.set(_Ticket(self, self._ledger.count()))

    @staticmethod
    def leave(token: Token[_Ticket | None]) -> None:
        """Take the ticket `admit` gave back."""
        _TICKET.reset(token)

    @contextmanager
    def forgetting(self, scope: Scope) -> Iterator[None]:
        """Hold the scope while forgetting in it: no write is in progress, and older tickets may write no more."""
        with self.lock(scope):
            number = self._ledger.record(scope)
            ticket = _TICKET.get()
            if ticket is not None and ticket.fence is self:
                # a forget the job itself carries out ("forget …" typed in chat): its later writes come after it
                ticket.admitted = number
            yield

    def lock(self, scope: Scope) -> _ScopeLock:
        """The scope's lock (re-entrant: a forget writes through the fenced stores itself)."""
        with self._guard:
            found = self._locks.get(scope)
            if found is None:
                found = self._locks[scope] = _ScopeLock(self._cluster, f"fence:{scope}")
            return found

    def stale(self, ticket: _Ticket, scope: Scope) -> bool:
        """Whether `scope` was forgotten after the ticket's job began."""
        return self._ledger.last(scope) > ticket.admitted


class _ScopeLock:
    """A scope's lock: re-entrant within a thread, and held cluster-wide by its outermost holder."""

    def __init__(self, cluster: ClusterLocks, name: str) -> None:
        self._local = threading.RLock()
        self._cluster = cluster
        self._name = name
        self._depth = 0
        self._held: contextlib.AbstractContextManager[None] | None = None

    def __enter__(self) -> None:
        self._local.acquire()
        try:
            if self._depth == 0:
                held = self._cluster.hold(self._name)
                held.__enter__()
                self._held = held
        except BaseException:
            self._local.release()
            raise
        self._depth += 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        try:
            if self._depth == 0 and self._held is not None:
                held, self._held = self._held, None
                held.__exit__(None, None, None)
        finally:
            self._local.release()


@contextmanager
def fenced_write(scope: Scope) -> Iterator[None]:
    """Wrap one write to `scope`: raises `ScopeForgottenError` if it was forgotten since the current job began."""
    ticket = _TICKET.get()
    if ticket is None:
        yield
        return
    with ticket.fence.lock(scope):
        if ticket.fence.stale(ticket, scope):
            raise ScopeForgottenError(f"{scope} was forgotten after this work began")
        yield
