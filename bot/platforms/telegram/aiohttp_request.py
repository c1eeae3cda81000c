"""The bot's calls to the Bot API on aiohttp: PTB's `BaseRequest`, its documented place for another HTTP client.

PTB's own `HTTPXRequest` keeps a pool of 256 connections, and httpcore looks over every connection of the pool, and
asks the socket of each idle one whether it was closed, at every request and every response: with the pool full
(hundreds of chats at once) a call cost about 2.3 ms of the event loop's CPU where aiohttp's pool, which finds a
free connection at once, costs 0.2 ms (measured against the fake Bot API with the pool warm; docs/performance/
benchmarks.md). A reply costs two calls or more ("typing…", the message, the edits of a growing reply), all on the
event loop, which is what bounds how many people one process answers.
"""

from __future__ import annotations

import aiohttp
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import ODVInput
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

POOL_SIZE = 256  # connections at most, as PTB's own request keeps
CONNECT_TIMEOUT = 5.0  # seconds, PTB's defaults
READ_TIMEOUT = 5.0
POOL_TIMEOUT = 1.0  # waiting for a free connection
# A call whose connection could not be had in time was not sent, so it is tried again: on an event loop hundreds of
# chats keep busy, a new connection's setup waited its turn past the timeout, and the reply it carried was lost.
CONNECT_ATTEMPTS = 3


class AiohttpRequest(BaseRequest):
    """Bot API calls over one `aiohttp.ClientSession`, with PTB's timeouts and errors (`TimedOut`, `NetworkError`)."""

    def __init__(self, *, pool_size: int = POOL_SIZE) -> None:
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float:
        return READ_TIMEOUT

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self._pool_size))

    async def shutdown(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        """See `BaseRequest.do_request`; aiohttp has no write timeout of its own: a write waits for the read."""
        if self._session is None:
            raise RuntimeError("this AiohttpRequest is not initialized")
        connect = _given(connect_timeout, CONNECT_TIMEOUT)
        timeout = aiohttp.ClientTimeout(
            sock_connect=connect,
            connect=None if connect is None else connect + (_given(pool_timeout, POOL_TIMEOUT) or 0.0),
            sock_read=_given(read_timeout, READ_TIMEOUT),
        )
        for attempt in range(CONNECT_ATTEMPTS):
            try:
                async with self._session.request(
                    method, url, data=_body(request_data), headers={"User-Agent": self.USER_AGENT}, timeout=timeout
                ) as response:
                    return response.status, await response.read()
            except aiohttp.ConnectionTimeoutError as error:  # nothing was sent: trying again sends nothing twice
                if attempt + 1 == CONNECT_ATTEMPTS:
                    raise TimedOut from error
            except TimeoutError as error:  # aiohttp.ServerTimeoutError too
                raise TimedOut from error
            except aiohttp.ClientError as error:
                raise NetworkError(f"aiohttp.{type(error).__name__}: {error}") from error
        raise AssertionError("unreachable: the last attempt returns or raises")


def _given(value: ODVInput[float], default: float) -> float | None:
    """A timeout as the call gave it (None: no limit), or ours when it left it to the default."""
    return default if isinstance(value, DefaultValue) else value


def _body(request_data: RequestData | None) -> aiohttp.FormData | dict[str, str] | None:
    """The parameters as a form, multipart when files go with them (as PTB's own request sends them)."""
    if request_data is None:
        return None
    fields = request_data.json_parameters
    files = request_data.multipart_data
    if not files:
        return fields
    form = aiohttp.FormData(fields)
    for name, (filename, content, mime_type) in files.items():
        form.add_field(name, content, filename=filename, content_type=mime_type)
    return form
