"""RateLimiter: a per-user cap on messages, so one person cannot flood the companion (or the LLM bill)."""

from __future__ import annotations

from collections import defaultdict, deque
from datetime import datetime, timedelta

from core.clock import Clock

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
