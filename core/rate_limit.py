"""Per-user limits, so one person cannot flood the companion or run up the LLM bill: `RateLimiter` caps messages a
minute, `DailyQuota` the tokens of a day."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Collection
from datetime import datetime, timedelta

from core.clock import Clock
from knowledge.records import Scope

WINDOW = timedelta(minutes=1)


class RateLimiter:
    """At most `per_minute` messages per user in any sliding minute; 0 means no limit."""

    def __init__(self, clock: Clock, per_minute: int) -> None:
        if per_minute < 0:
            raise ValueError("the rate limit cannot be negative")
        self.per_minute = per_minute
        self._clock = clock
        self._recent: defaultdict[str, deque[datetime]] = defaultdict(deque)  # user id -> times of accepted messages

    def allow(self, user_id: str) -> bool:
        """Whether this user may send a message now; an allowed message counts against the limit."""
        if self.per_minute == 0:
            return True
        now = self._clock.now()
        recent = self._recent[user_id]
        while recent and now - recent[0] >= WINDOW:
            recent.popleft()
        if len(recent) >= self.per_minute:
            return False
        recent.append(now)
        return True


class DailyQuota:
    """At most `daily_tokens` tokens of replies per user and persona in a day of the user's own time (0: no limit);
    `spent(scope, since)` counts them (from the shared stores, so every process counts the same)."""

    def __init__(
        self,
        spent: Callable[[Scope, datetime], int],
        daily_tokens: int,
        exempt: Collection[str] = (),
        persona_tokens: Callable[[str], int | None] = lambda persona_id: None,
        members: Callable[[str], list[str]] = lambda user_id: [user_id],
    ) -> None:
        """`persona_tokens`: a persona's own quota, where it sets one (None: `daily_tokens`). `members`: the
        identities of a scope's user (a linked person's, `Links.members`), any of which may be the exempt one."""
        self.daily_tokens = daily_tokens
        self._spent = spent
        self._exempt = frozenset(exempt)
        self._persona_tokens = persona_tokens
        self._members = members

    def limit(self, scope: Scope) -> int | None:
        """The user's daily tokens with this persona; None if they have no quota (none set, or exempt)."""
        own = self._persona_tokens(scope.persona_id)
        limit = self.daily_tokens if own is None else own
        if limit <= 0 or (self._exempt and not self._exempt.isdisjoint([scope.user_id, *self._members(scope.user_id)])):
            return None
        return limit

    def spent_today(self, scope: Scope, local_now: datetime) -> int:
        """The tokens the user's replies took since their local midnight."""
        return self._spent(scope, local_now.replace(hour=0, minute=0, second=0, microsecond=0))

    def exhausted(self, scope: Scope, local_now: datetime) -> bool:
        """Whether the user has used up today's tokens; they get them back at their local midnight."""
        limit = self.limit(scope)
        return limit is not None and self.spent_today(scope, local_now) >= limit
