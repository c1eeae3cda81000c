"""Telegram's flood limits: PTB's `AIORateLimiter`, with replies delayed until Telegram allows them, never dropped.

Telegram allows a bot about 30 messages a second overall and 20 a minute in one group, and answers
beyond that with "retry after N seconds". `AIORateLimiter` paces every call to those limits and, on a
"retry after", holds all calls for N seconds and tries again; we let it try many times, so a reply
waits rather than turning into an apology. A message whose connection could not even be opened (so
Telegram cannot have seen it) is sent again too, a few times; one that may have arrived is not, so
nothing is sent twice. Calls that only decorate a reply ("typing…", a draft or an edit while the reply
grows) are marked `BEST_EFFORT`: they are skipped rather than delayed when the limits are tight, and use
at most two thirds of each limit, so they never hold back a real message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
from telegram.constants import FloodLimit
from telegram.error import NetworkError, RetryAfter
from telegram.ext import AIORateLimiter

log = logging.getLogger(__name__)

BEST_EFFORT = "best-effort"  # `rate_limit_args` of a call that may be skipped (typing, drafts, interim edits)
REPLY_RETRIES = 20  # "retry after" answers a message survives; Telegram asks for seconds, rarely a minute
UNSENT_RETRIES = 5  # connections that could not be opened, a message survives (tried again after 1, 2, 4, 8, 16 s)
_KEPT_FOR_MESSAGES = 1 / 3  # of each limit, never used by best-effort calls


class FloodControl(AIORateLimiter):
    """`AIORateLimiter` with many retries for messages, and best-effort calls that skip instead of waiting."""

    def __init__(
        self,
        *,
        max_retries: int = REPLY_RETRIES,
        unsent_backoff: float = 1.0,
        per_second: float = FloodLimit.MESSAGES_PER_SECOND,
    ) -> None:
        """`unsent_backoff`: seconds before a message whose connection failed is sent again, doubling each time;
        `per_second`: calls a second overall (Telegram's limit; a benchmark lifts it to find the companion's own)."""
        super().__init__(overall_max_rate=per_second, max_retries=max_retries)
        self._unsent_backoff = unsent_backoff

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, bool | dict[str, Any] | list[dict[str, Any]]]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | str | None,
    ) -> bool | dict[str, Any] | list[dict[str, Any]]:
        if rate_limit_args == BEST_EFFORT:
            return await self._best_effort(callback, args, kwargs, endpoint, data)
        for attempt in range(UNSENT_RETRIES):
            try:
                return await super().process_request(callback, args, kwargs, endpoint, data, rate_limit_args)  # type: ignore[arg-type]
            except NetworkError as error:
                # only what goes to a chat: polling (getUpdates) has its own retries
                if data.get("chat_id") is None or not never_sent(error):
                    raise
                log.warning("could not reach Telegram for a %s (%s); trying again", endpoint, error)
                await asyncio.sleep(self._unsent_backoff * 2**attempt)
        return await super().process_request(callback, args, kwargs, endpoint, data, rate_limit_args)  # type: ignore[arg-type]

    async def _best_effort(
        self,
        callback: Callable[..., Coroutine[Any, Any, bool | dict[str, Any] | list[dict[str, Any]]]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
    ) -> bool | dict[str, Any] | list[dict[str, Any]]:
        """The call now if the limits leave room, else not at all (True, as Telegram answers a skipped frame)."""
        group = _group_of(data)
        if not self._has_room(group):
            return True  # skipped: the next frame, or the reply itself, shows the same
        try:
            return await self._run_request(
                chat=True, group=group, allow_paid_broadcast=False, callback=callback, args=args, kwargs=kwargs
            )
        except RetryAfter:
            log.info("Telegram asked to slow down; a %s was skipped", endpoint)
            return True

    def _has_room(self, group: int | str | bool) -> bool:
        """Whether a best-effort call can go now without waiting, leaving a third of each limit to messages."""
        if not self._retry_after_event.is_set():  # Telegram asked everyone to wait
            return False
        limiters = [self._base_limiter] if self._base_limiter is not None else []
        if group and self._group_max_rate:
            limiters.append(self._get_group_limiter(group))
        return all(limiter.has_capacity(1 + limiter.max_rate * _KEPT_FOR_MESSAGES) for limiter in limiters)


def never_sent(error: NetworkError) -> bool:
    """Whether the call certainly never reached Telegram: its connection could not be opened or had no room.

    A call that failed later (a read error, a read timeout) may have been carried out; it is not repeated.
    """
    return isinstance(error.__cause__, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))


def _group_of(data: dict[str, Any]) -> int | str | bool:
    """The group a call goes to (AIORateLimiter's rule: negative ids and @usernames), or False."""
    chat_id = data.get("chat_id")
    try:
        chat_id = int(chat_id)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        pass
    if (isinstance(chat_id, int) and chat_id < 0) or isinstance(chat_id, str):
        return chat_id
    return False
