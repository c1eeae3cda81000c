"""Flood control's own rules, on PTB's request callback: what is sent again, what is skipped, what never twice.

The whole path (PTB's Application, its HTTP requests, the fake Bot API's 429 "retry after") is tested in
test_telegram_adapter.py; here the request itself is a stand-in that fails the way a network does.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from telegram.error import NetworkError, TimedOut

from bot.platforms.telegram.flood_control import BEST_EFFORT, UNSENT_RETRIES, FloodControl


class FlakyNetwork:
    """A Bot API request that fails with `errors` (each raised as PTB raises it, from httpx's), then succeeds."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        if self.errors:
            cause = self.errors.pop(0)
            wrapped = TimedOut() if isinstance(cause, httpx.TimeoutException) else NetworkError(str(cause))
            raise wrapped from cause
        return {"message_id": 1}


async def send(control: FloodControl, request: FlakyNetwork, rate_limit_args: Any = None) -> Any:
    data = {"chat_id": 7, "text": "hello"}
    return await control.process_request(request, (), {}, "sendMessage", data, rate_limit_args)


async def test_a_message_whose_connection_could_not_open_is_sent_again() -> None:
    request = FlakyNetwork(httpx.ConnectError("refused"), httpx.ConnectTimeout("slow"), httpx.PoolTimeout("full"))
    assert await send(FloodControl(unsent_backoff=0), request) == {"message_id": 1}
    assert request.calls == 4


async def test_a_message_that_may_have_arrived_is_never_sent_twice() -> None:
    for error in (httpx.ReadError("reset"), httpx.ReadTimeout("slow answer")):
        request = FlakyNetwork(error)
        with pytest.raises(NetworkError):
            await send(FloodControl(unsent_backoff=0), request)
        assert request.calls == 1


async def test_a_network_that_stays_down_is_reported_after_the_retries() -> None:
    request = FlakyNetwork(*[httpx.ConnectError("down")] * (UNSENT_RETRIES + 1))
    with pytest.raises(NetworkError):
        await send(FloodControl(unsent_backoff=0), request)
    assert request.calls == UNSENT_RETRIES + 1


async def test_best_effort_calls_are_skipped_while_telegram_asks_everyone_to_wait() -> None:
    control = FloodControl(unsent_backoff=0)
    request = FlakyNetwork()
    control._retry_after_event.clear()  # as after a "retry after": AIORateLimiter holds every call
    assert await send(control, request, BEST_EFFORT) is True
    assert request.calls == 0
    control._retry_after_event.set()
    assert await send(control, request, BEST_EFFORT) == {"message_id": 1}
