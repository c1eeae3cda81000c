"""Secrets never reach a log: bot tokens and API keys are redacted from every record, at every level.

httpx logs each request's URL at INFO, and the Telegram Bot API puts the bot token in the URL
(`https://api.telegram.org/bot123:ABC/getUpdates`); an exception's text may quote a header or a URL
too. So one filter rewrites every record before any handler formats it: the configured secrets by
value, and anything shaped like a bot token, an API key or a bearer token by pattern (a key from
somewhere else, a second bot). A filter on a logger only sees records logged to that logger itself,
not those propagated from `httpx` or `telegram`, so it sits on the root logger *and* on its handlers.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterable

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 6  # shorter "secrets" would redact ordinary words
_SHAPES = [
    (re.compile(r"(?<=/bot)[^/\s]+"), REDACTED),  # Telegram: the token is the path segment after /bot
    (re.compile(r"\b\d{5,}:[A-Za-z0-9_-]{20,}\b"), REDACTED),  # a Telegram bot token on its own
    (re.compile(r"\b[A-Za-z0-9_-]{23,28}\.[A-Za-z0-9_-]{6,7}\.[A-Za-z0-9_-]{27,}\b"), REDACTED),  # Discord
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED),  # OpenAI-style API keys
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), rf"\g<1>{REDACTED}"),
    (re.compile(r"(?i)((?:api[_-]?key|token|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"), rf"\g<1>{REDACTED}"),
]


class SecretRedactor(logging.Filter):
    """Rewrites a record's message, exception and stack text without the secrets."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets = sorted({secret for secret in secrets if len(secret) >= MIN_SECRET_CHARS}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """`text` with every configured secret and every token-shaped string replaced."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        for shape, replacement in _SHAPES:
            text = shape.sub(replacement, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a record whose arguments do not fit: the handler reports it
            return True
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info:
            # formatted here, so no handler formats the original exception text again
            record.exc_text = self.redact("".join(traceback.format_exception(*record.exc_info)).rstrip())
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


def redact_secrets(secrets: Iterable[str]) -> SecretRedactor:
    """Install (once) a redactor for these secrets on the root logger and each of its handlers."""
    root = logging.getLogger()
    redactor = SecretRedactor(secrets)
    for owner in [root, *root.handlers]:
        for old in [each for each in owner.filters if isinstance(each, SecretRedactor)]:
            owner.removeFilter(old)
        owner.addFilter(redactor)
    return redactor
