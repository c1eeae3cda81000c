"""How the companion answers on Telegram: the chat a message arrived in (`TelegramChat`, the pipeline's
`Chat`), and where a reply appears while it grows (the `ReplySurface`s of `bot.platforms.streaming`).

In a private chat the reply grows as a draft (`sendMessageDraft`, Bot API 10), and each finished part
is sent as a message. In a group (drafts are for private chats) each part is sent as soon as its first
words exist and edited as it grows. Everything is plain text, without any parse mode (model output can
never break formatting), split at Telegram's limit.
"""

from __future__ import annotations

import secrets

from telegram import Bot, InlineKeyboardMarkup, Message
from telegram.constants import ChatAction

from bot.platforms.render import TELEGRAM_LIMIT, split_message
from bot.platforms.streaming import EditedMessages, ReplySurface, Typing
from bot.platforms.telegram.flood_control import BEST_EFFORT
from bot.platforms.telegram.places import is_group

TYPING_REFRESH = 4.5  # seconds; Telegram shows "typing" for about five seconds per action
# Seconds between updates of a growing reply: about one a second per chat, and in groups, where a bot may
# send 20 messages a minute, every three seconds.
PRIVATE_PACE = 1.0
GROUP_PACE = 3.0


class TelegramChat:
    """The chat a message arrived in: the reply grows in a draft (private) or an edited message (group), paced."""

    limit = TELEGRAM_LIMIT

    def __init__(self, bot: Bot, message: Message, *, streaming: bool) -> None:
        self._bot = bot
        self._message = message
        self._group = is_group(message.chat)
        self.pace = (GROUP_PACE if self._group else PRIVATE_PACE) if streaming else None

    def reply(self) -> ReplySurface:
        return EditedReply(self._bot, self._message) if self._group else DraftReply(self._bot, self._message.chat.id)

    async def send(self, text: str) -> None:
        await send_here(self._message, text)

    def typing(self) -> Typing:
        """Shows "typing…" while the reply is prepared, until its first words show; best effort."""

        async def send() -> None:
            await self._bot.send_chat_action(self._message.chat.id, ChatAction.TYPING, rate_limit_args=BEST_EFFORT)  # type: ignore[call-arg]

        return Typing(send, refresh=TYPING_REFRESH)


async def send_here(message: Message, text: str, keyboard: InlineKeyboardMarkup | None = None) -> None:
    """An answer in the chat of `message`; in a group the first part quotes it, so it is clear whom it answers.
    The buttons go with the last part."""
    chunks = split_message(text, TELEGRAM_LIMIT)
    for index, chunk in enumerate(chunks):
        markup = keyboard if index == len(chunks) - 1 else None
        await message.reply_text(chunk, do_quote=is_group(message.chat) and index == 0, reply_markup=markup)


async def send_to(bot: Bot, chat_id: int, text: str, keyboard: InlineKeyboardMarkup | None = None) -> None:
    """An answer in the chat `chat_id` (a private chat: the user's id); the buttons go with the last part."""
    chunks = split_message(text, TELEGRAM_LIMIT)
    for index, chunk in enumerate(chunks):
        await bot.send_message(chat_id=chat_id, text=chunk, reply_markup=keyboard if index == len(chunks) - 1 else None)


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
