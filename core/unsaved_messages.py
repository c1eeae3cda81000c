"""Messages that could not be stored (a full or failing disk): kept in memory for a while, stored when possible.

The user is told at once that their message is held, not saved. Every later turn, and the idle pass
every few minutes, first tries to store what is held, in the order it arrived; what is held longer than
`keep_for`, beyond `max_kept`, or still at shutdown is dropped with an error in the log that says
plainly how many messages were lost.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from core.clock import Clock
from core.types import IncomingMessage
from knowledge.errors import storage_problem
from knowledge.records import Scope

log = logging.getLogger(__name__)

KEEP_FOR = timedelta(hours=1)
MAX_KEPT = 1000
Store = Callable[[str, Scope, IncomingMessage, bool], object]  # persona id, scope, message, said in a group


@dataclass(frozen=True, slots=True)
class _Held:
    persona_id: str
    scope: Scope
    message: IncomingMessage
    group: bool
    since: datetime


class UnsavedMessages:
    """User messages the store refused, held in arrival order until `store` accepts them."""

    def __init__(self, store: Store, clock: Clock, *, keep_for: timedelta = KEEP_FOR, max_kept: int = MAX_KEPT) -> None:
        self._store = store
        self._clock = clock
        self._keep_for = keep_for
        self._max_kept = max_kept
        self._held: deque[_Held] = deque()

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, persona_id: str, scope: Scope, message: IncomingMessage, *, group: bool) -> None:
        """Keep a message the store refused."""
        self._held.append(_Held(persona_id, scope, message, group, self._clock.now()))
        if len(self._held) > self._max_kept:
            self._held.popleft()
            log.error("storage unavailable: more than %d messages held, the oldest one is lost", self._max_kept)

    def save(self) -> bool:
        """Store what is held, oldest first; True when nothing is held any more."""
        while self._held:
            held = self._held[0]
            try:
                self._store(held.persona_id, held.scope, held.message, held.group)
            except Exception as error:
                if storage_problem(error) is None:
                    raise
                self._expire()
                return False
            self._held.popleft()
            log.warning("stored a message held while storage was unavailable")
        return True

    def give_up(self) -> int:
        """At shutdown: the messages still held are lost; say so plainly. Returns how many."""
        lost = len(self._held)
        if lost:
            log.error("storage unavailable: %d messages could not be stored and are lost", lost)
        self._held.clear()
        return lost

    def _expire(self) -> None:
        expired = 0
        while self._held and self._clock.now() - self._held[0].since > self._keep_for:
            self._held.popleft()
            expired += 1
        if expired:
            log.error("storage unavailable for over %s: %d held messages are lost", self._keep_for, expired)
