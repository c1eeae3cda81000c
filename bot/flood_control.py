"""Telegram's flood limits: PTB's `AIORateLimiter`, with replies delayed until Telegram allows them, never dropped.

Telegram allows a bot about 30 messages a second overall and 20 a minute in one group, and answers
beyond that with "retry after N seconds". `AIORateLimiter` paces every call to those limits and, on a
"retry after", holds all calls for N seconds and tries again; we let it try many times, so a reply
waits rather than turning into an apology. Calls that only decorate a reply ("typing…", a draft or an
edit while the reply grows) are marked `BEST_EFFORT`: they are skipped rather than delayed when the
limits are tight, and use at most two thirds of each limit, so they never hold back a real message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from telegram.error import RetryAfter
from telegram.ext import AIORateLimiter

log = logging.getLogger(__name__)

BEST_EFFORT = "best-effort"  # `rate_limit_args` of a call that may be skipped (typing, drafts, interim edits)
REPLY_RETRIES = 20  # "retry after" answers a message survives; Telegram asks for seconds, rarely a minute
_KEPT_FOR_MESSAGES = 1 / 3  # of each limit, never used by best-effort calls


class FloodControl(AIORateLimiter):
    """`AIORateLimiter` with many retries for messages, and best-effort calls that skip instead of waiting."""

    def __init__(self, *, max_retries: int = REPLY_RETRIES) -> None:
        super().__init__(max_retries=max_retries)

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, bool | dict[str, Any] | list[dict[str, Any]]]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | str | None,
    ) -> bool | dict[str, Any] | list[dict[str, Any]]:
        if rate_limit_args != BEST_EFFORT:
            return await super().process_request(callback, args, kwargs, endpoint, data, rate_limit_args)  # type: ignore[arg-type]
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
