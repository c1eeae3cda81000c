"""Where a reply appears on Telegram while it grows (the `ReplySurface`s of `bot.platforms.streaming`).

In a private chat the reply grows as a draft (`sendMessageDraft`, Bot API 10), and each finished part
is sent as a message. In a group (drafts are for private chats) each part is sent as soon as its first
words exist and edited as it grows. Everything is plain text, without any parse mode, as every reply.
"""

from __future__ import annotations

import secrets

from telegram import Bot, Message

from bot.platforms.streaming import EditedMessages
from bot.platforms.telegram.flood_control import BEST_EFFORT


def _new_draft_id() -> int:
    return secrets.randbelow(2**31 - 1) + 1  # non-zero; changes of one draft are animated


class DraftReply:
    """A private chat: the part being written is a draft, and becomes a message once finished."""

    def __init__(self, bot: Bot, chat_id: int) -> None:
        self._bot = bot
        self._chat_id = chat_id
        self._draft_id = _new_draft_id()

    async def show(self, text: str) -> None:
        await self._bot.send_message_draft(
            chat_id=self._chat_id,
            draft_id=self._draft_id,
            text=text,
            rate_limit_args=BEST_EFFORT,  # type: ignore[call-arg]
        )

    async def finish(self, text: str) -> None:
        await self._bot.send_message(chat_id=self._chat_id, text=text)
        self._draft_id = _new_draft_id()  # the next part is a draft of its own


class EditedReply(EditedMessages[Message]):
    """A group: each part is sent with its first words and edited as it grows; the first quotes the message
    it answers, so it is clear whom the companion answers."""

    def __init__(self, bot: Bot, answered: Message) -> None:
        super().__init__()
        self._bot = bot
        self._answered = answered

    async def _send(self, text: str, *, first: bool) -> Message:
        return await self._answered.reply_text(text, do_quote=first)

    async def _edit(self, sent: Message, text: str, *, final: bool) -> bool:
        # growing, an edit may be skipped under the flood limits; the final one waits for its turn
        limits = {} if final else {"rate_limit_args": BEST_EFFORT}
        edited = await self._bot.edit_message_text(
            text=text,
            chat_id=sent.chat_id,
            message_id=sent.message_id,
            **limits,  # type: ignore[arg-type]
        )
        return isinstance(edited, Message)  # not a best-effort edit skipped under the flood limits
