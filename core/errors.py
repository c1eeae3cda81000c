"""Errors raised by the turn pipeline."""

from __future__ import annotations


class CompanionError(Exception):
    """Base of every error the companion raises on purpose."""


class UserFacingError(CompanionError):
    """An error whose message is safe and useful to show to the person chatting."""


class RecipientRefusedError(CompanionError):
    """A platform will not deliver to this user: they blocked the bot, or their DMs are closed."""


class LLMError(CompanionError):
    """The language model could not produce an answer (after retries)."""

    def __init__(self, message: str, *, role: str, original: BaseException | None = None) -> None:
        super().__init__(message)
        self.role = role
        self.original = original
