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
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass

from .records import Scope


class ScopeForgottenError(Exception):
    """The scope was forgotten after this work began; it must not write what it read before."""


@dataclass(slots=True)
class _Ticket:
    fence: ForgetFence
    admitted: int  # the fence's forget count when the job started


_TICKET: ContextVar[_Ticket | None] = ContextVar("forget_ticket", default=None)


class ForgetFence:
    """When each scope was last forgotten, and the locks that order forgets and writes."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Scope, threading.RLock] = {}
        self._forgets = 0  # forgets so far, in this process
        self._last_forget: dict[Scope, int] = {}  # scope -> the count its last forget got

    def admit(self) -> Token[_Ticket | None]:
        """Give the current context (a background job) a ticket: it may write what it reads from now on."""
        return _TICKET.set(_Ticket(self, self._forgets))

    @staticmethod
    def leave(token: Token[_Ticket | None]) -> None:
        """Take the ticket `admit` gave back."""
        _TICKET.reset(token)

    @contextmanager
    def forgetting(self, scope: Scope) -> Iterator[None]:
        """Hold the scope while forgetting in it: no write is in progress, and older tickets may write no more."""
        with self.lock(scope):
            with self._guard:
                self._forgets += 1
                self._last_forget[scope] = self._forgets
            ticket = _TICKET.get()
            if ticket is not None and ticket.fence is self:
                # a forget the job itself carries out ("forget …" typed in chat): its later writes come after it
                ticket.admitted = self._forgets
            yield

    def lock(self, scope: Scope) -> threading.RLock:
        """The scope's lock (re-entrant: a forget writes through the fenced stores itself)."""
        with self._guard:
            return self._locks.setdefault(scope, threading.RLock())

    def stale(self, ticket: _Ticket, scope: Scope) -> bool:
        """Whether `scope` was forgotten after the ticket's job began."""
        return self._last_forget.get(scope, 0) > ticket.admitted


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
