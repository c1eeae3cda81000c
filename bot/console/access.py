"""Who may open the console: the operator's token, the browser sessions it opens, and failed logins held back.

The API takes the token as `Authorization: Bearer <token>`. A browser logs in with it once and gets a
session cookie (HttpOnly, SameSite=Strict); every form it posts carries the session's CSRF token. Sessions
live in the serving process only: a restart logs the browser out, and the token never leaves the server.
"""

from __future__ import annotations

import hmac
import os
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot.config import Settings

TOKEN_FILE = "console-token"
SESSION_SECONDS = 12 * 3600
FAILED_LOGINS = 5  # a client's failed logins allowed within the window, then it waits
FAILED_LOGIN_WINDOW = 15 * 60


def operator_token(settings: Settings) -> tuple[str, bool]:
    """`COMPANION_WEB_TOKEN`, or the token kept in the data directory, made (owner-only) on the first start;
    and whether it was made just now (then it is shown once)."""
    if settings.web.token is not None:
        return settings.web.token.get_secret_value(), False
    path = settings.storage.data_dir / TOKEN_FILE
    try:
        return path.read_text(encoding="utf-8").strip(), False
    except FileNotFoundError:
        return _new_token(path), True


def _new_token(path: Path) -> str:
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    # owner-only from the moment it exists
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(token + "\n")
    return token


@dataclass(slots=True)
class Session:
    """A logged-in browser: its CSRF token and when it ends."""

    csrf: str
    ends: float


class Access:
    """The token check, the sessions, and the brake on a client's failed logins."""

    def __init__(self, token: str, *, now: Callable[[], float] = time.monotonic) -> None:
        self._token = token
        self._now = now
        self._sessions: dict[str, Session] = {}
        self._failures: dict[str, deque[float]] = {}

    @staticmethod
    def same(given: str, expected: str) -> bool:
        """Whether a secret given matches the one expected (compared in constant time; an empty one never does)."""
        return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())

    def is_token(self, given: str) -> bool:
        """Whether `given` is the operator token."""
        return self.same(given, self._token)

    def bearer_ok(self, header: str | None) -> bool:
        """Whether an `Authorization` header carries the token."""
        scheme, _, given = (header or "").partition(" ")
        return scheme.lower() == "bearer" and self.is_token(given.strip())

    def session(self, key: str | None) -> Session | None:
        """The live session of a cookie, if any."""
        found = self._sessions.get(key or "")
        if found is None or found.ends <= self._now():
            self._sessions.pop(key or "", None)
            return None
        return found

    def log_in(self, client: str, given: str) -> str | None:
        """A new session's key if `given` is the token; None if not (counted against `client`)."""
        if not self.is_token(given):
            self._failures.setdefault(client, deque()).append(self._now())
            return None
        self._failures.pop(client, None)
        key = secrets.token_urlsafe(32)
        self._sessions[key] = Session(secrets.token_urlsafe(32), self._now() + SESSION_SECONDS)
        return key

    def log_out(self, key: str | None) -> None:
        """End a session."""
        self._sessions.pop(key or "", None)

    def held_back(self, client: str) -> float:
        """Seconds `client` must wait before it may try to log in again (0: it may now)."""
        failures = self._failures.get(client)
        if not failures:
            return 0.0
        while failures and failures[0] <= self._now() - FAILED_LOGIN_WINDOW:
            failures.popleft()
        if len(failures) < FAILED_LOGINS:
            return 0.0
        return failures[0] + FAILED_LOGIN_WINDOW - self._now()
