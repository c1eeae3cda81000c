"""Telegram updates as the Bot API delivers them, for `FakeBotAPI.push_update` or `Application.update_queue`."""

from __future__ import annotations

import itertools
import time
from typing import Any

from telegram import Update
from telegram.ext import Application

_ids = itertools.count(1)


def person(user_id: int, first_name: str) -> dict[str, Any]:
    """A human Telegram user."""
    return {"id": user_id, "is_bot": False, "first_name": first_name}


def private_chat(user: dict[str, Any]) -> dict[str, Any]:
    """The private chat between `user` and the bot (its id is the user's)."""
    return {"id": user["id"], "type": "private", "first_name": user["first_name"]}


def text_update(text: str, *, user: dict[str, Any], chat: dict[str, Any] | None = None) -> dict[str, Any]:
    """A new text message from `user`, in their private chat unless `chat` is given; a command is marked as one."""
    message: dict[str, Any] = {
        "message_id": next(_ids),
        "date": int(time.time()),
        "chat": chat or private_chat(user),
        "from": user,
        "text": text,
    }
    if text.startswith("/"):
        message["entities"] = [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}]
    return {"update_id": next(_ids), "message": message}


async def feed(application: Application, payload: dict[str, Any]) -> None:  # type: ignore[type-arg]
    """Hand `application` one update, as its updater would."""
    await application.process_update(Update.de_json(payload, application.bot))
