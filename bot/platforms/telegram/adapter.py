"""The Telegram adapter: a python-telegram-bot `Application` whose handlers say what arrived (an `Arrival`
for the message pipeline, a `Call` for the chat commands) and show what they answer. All memory logic
stays in core/; what to answer, and where, is the same on every platform (`bot.platforms.pipeline`,
`bot.platforms.commands`).

Private chats: every text message and photo is answered. Groups: only messages that mention the bot
(@username) or reply to it, or every message in the chats the operator chose. Memory scope is (persona,
Telegram user); the conversation is the chat, whose persona the operator's rules decide. Replies are sent
as plain text (no parse mode), split at 4,096, and grow while they are written (`reply.py`): a draft in
private chats, a message edited in groups. An answer only the caller may read goes to their private chat.
Every call goes through `FloodControl` (flood limits delay a reply, never drop it).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from telegram import (
    Bot,
    BotCommand,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    MessageEntity,
    PhotoSize,
    Update,
)
from telegram.constants import ChatType
from telegram.error import Forbidden
from telegram.ext import (
    Application,
    ApplicationBuilder,
    ApplicationHandlerStop,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    TypeHandler,
    filters,
)

from bot.platforms.commands import (
    COMMANDS,
    FORGET_ANSWER,
    NOT_YOUR_BUTTON,
    Call,
    ChatCommands,
    Command,
    Question,
    Reply,
    Visibility,
    help_text,
)
from bot.platforms.pipeline import Arrival, MessagePipeline, PlatformContext
from bot.platforms.streaming import MonotonicTimer, Timer
from bot.platforms.telegram.aiohttp_request import AiohttpRequest
from bot.platforms.telegram.flood_control import FloodControl
from bot.platforms.telegram.places import PLATFORM, is_group, place_of, source_of, user_of
from bot.platforms.telegram.reply import TelegramChat, send_here, send_to
from bot.platforms.telegram.update_processor import PerChatUpdateProcessor
from core import phrasebook
from core.companion import Companion
from core.errors import RecipientRefusedError, UserFacingError
from core.types import ConversationRef, Image, UserRef

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.telegram.org"
HELP_TEXT = help_text("Talk to me in a private chat, or mention me (or reply to me) in a group.")
MENU = tuple(BotCommand(command.name, command.summary) for command in COMMANDS)
SENT_PRIVATELY = "I've answered you in a private message."
NEEDS_PRIVATE_CHAT = "I can't message you privately yet: open a private chat with me, press Start, and ask there."
# At a stop, how long the updates still waiting for their turn may take to be kept for the next start, and during a
# database outage how long those running may take to be held (each takes moments).
KEEP_SECONDS = 3.0
OUTAGE_SETTLE_SECONDS = 3.0
Handler = Callable[[Update, ContextTypes.DEFAULT_TYPE], Coroutine[Any, Any, None]]
# The new messages a handler answers, by kind: those of the pipeline are stored (a command's are not).
_NEW_MESSAGES = filters.UpdateType.MESSAGE
_COMMAND = _NEW_MESSAGES & filters.COMMAND
_TEXT = _NEW_MESSAGES & filters.TEXT
_IMAGE = _NEW_MESSAGES & (filters.PHOTO | filters.Document.IMAGE)


def _from_a_bot(update: Update) -> bool:
    """Whether `update` comes from a bot (ourselves included) or from no one: such updates go unanswered."""
    user = update.effective_user
    return user is None or user.is_bot


def build_telegram_application(
    context: PlatformContext,
    token: str,
    base_url: str = DEFAULT_BASE_URL,
    *,
    polling: bool = True,
    timer: Timer | None = None,
    flood_control: FloodControl | None = None,
) -> Application:  # type: ignore[type-arg]
    """A PTB `Application` talking to `base_url` (Telegram, a self-hosted Bot API server, or a fake).

    `polling=False` builds it without an updater, for feeding updates with `process_update`; `timer`
    paces growing replies (tests pass one that does not really wait); `flood_control`: Telegram's limits as
    `FloodControl()` keeps them, by default.
    """
    base_url = base_url.rstrip("/")
    builder = (
        ApplicationBuilder()
        .token(token)
        .base_url(f"{base_url}/bot")
        .base_file_url(f"{base_url}/file/bot")
        .request(AiohttpRequest())  # the bot's calls; long polling keeps PTB's own client, one connection
        .rate_limiter(flood_control or FloodControl())
    )
    adapter = TelegramAdapter(context, timer or MonotonicTimer())
    # many chats at once, each one in order (across processes too, in server mode)
    builder = builder.concurrent_updates(PerChatUpdateProcessor(order=context.order, on_arrival=adapter.arrived))
    if not polling:
        builder = builder.updater(None)
    application = builder.build()
    adapter.register(application)
    return application


@dataclass(frozen=True, slots=True)
class Webhook:
    """Telegram posts updates to `url` (a proxy forwards them to `listen`:`port`), each with `secret`."""

    url: str
    listen: str = "127.0.0.1"
    port: int = 8443
    secret: str | None = None


async def run_telegram(
    context: PlatformContext, token: str, base_url: str = DEFAULT_BASE_URL, *, webhook: Webhook | None = None
) -> None:
    """Poll Telegram, or serve a webhook, until cancelled (Ctrl-C); the caller starts and closes the app."""
    application = build_telegram_application(context, token, base_url)
    async with application:
        await application.bot.set_my_commands(MENU)
        await application.start()
        outbox = start_checkins(context.companion, application)
        assert application.updater is not None
        if webhook is None:
            await application.updater.start_polling(drop_pending_updates=False)
        else:  # every process sets the same webhook; the proxy spreads the updates over them
            await application.updater.start_webhook(
                listen=webhook.listen,
                port=webhook.port,
                url_path=urlsplit(webhook.url).path.lstrip("/"),
                webhook_url=webhook.url,
                secret_token=webhook.secret,
                drop_pending_updates=False,
            )
        try:
            await asyncio.Event().wait()
        finally:
            context.companion.stop_checkins_through(outbox)
            await application.updater.stop()
            processor = application.update_processor
            if isinstance(processor, PerChatUpdateProcessor):
                kept = await processor.keep_waiting(KEEP_SECONDS)
                if kept:
                    log.warning("stopping: %d updates waiting for their turn are kept for the next start", kept)
                if context.held is not None and context.held.outage:
                    # a turn running now finds the database away and holds its message, in moments, which the stop
                    # keeps for the next start; abandoned before that, its message would be lost
                    await processor.settle(OUTAGE_SETTLE_SECONDS)
                abandoned = processor.abandon()  # their messages are stored already
                if abandoned:
                    log.warning("stopping: abandoned %d updates in progress", abandoned)
            await application.stop()


class TelegramOutbox:
    """Check-ins leave through the application's bot (its flood control included), to private chats only."""

    def __init__(self, bot: Bot) -> None:
        self._bot = bot

    def reaches(self, user: UserRef) -> bool:
        return user.platform == PLATFORM

    async def deliver(self, user: UserRef, conversation: ConversationRef, text: str) -> None:
        try:
            await send_to(self._bot, int(conversation.id), text)  # a private chat: its id is the user's
        except Forbidden as error:  # "bot was blocked by the user", "user is deactivated", ...
            raise RecipientRefusedError(error.message) from error


def start_checkins(companion: Companion, application: Application) -> TelegramOutbox:  # type: ignore[type-arg]
    """Send check-ins through this (initialized) application from now on, starting with those already due."""
    outbox = TelegramOutbox(application.bot)
    companion.send_checkins_through(outbox)
    companion.send_due_checkins()
    return outbox


class TelegramAdapter:
    """Thin handlers: say what arrived, and show what the pipeline and the commands answer."""

    def __init__(self, context: PlatformContext, timer: Timer) -> None:
        self._companion = context.companion
        self._streaming = context.streaming
        # no turn order here: PTB's update processor hands each chat's updates over in order
        self._pipeline = MessagePipeline(context.companion, context.router, timer=timer, held=context.held)
        self._commands = ChatCommands(context.companion, context.router, help=HELP_TEXT)
        self._bot: Bot | None = None

    def register(self, application: Application) -> None:  # type: ignore[type-arg]
        self._bot = application.bot
        # Group -1 runs first: updates from bots (including ourselves) stop here, unanswered.
        application.add_handler(TypeHandler(Update, self._drop_bots), group=-1)
        new_messages = _NEW_MESSAGES
        application.add_handler(CommandHandler("start", self.start, filters=new_messages))
        for command in COMMANDS:
            application.add_handler(CommandHandler(command.name, self._command(command), filters=new_messages))
        application.add_handler(CallbackQueryHandler(self.forget_answer, pattern=FORGET_ANSWER))
        application.add_handler(MessageHandler(_COMMAND, self.unknown_command))
        application.add_handler(MessageHandler(_TEXT, self.text))
        application.add_handler(MessageHandler(_IMAGE, self.photo))
        application.add_handler(MessageHandler(new_messages & (filters.VOICE | filters.VIDEO_NOTE), self.voice))
        application.add_handler(MessageHandler(filters.UpdateType.EDITED_MESSAGE & filters.TEXT, self.edited))
        application.add_handler(MessageHandler(new_messages & ~filters.TEXT & ~filters.StatusUpdate.ALL, self.not_text))
        application.add_error_handler(self._on_error)

    # --- commands --------------------------------------------------------------------------------

    async def _drop_bots(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        if _from_a_bot(update):
            raise ApplicationHandlerStop

    def _command(self, command: Command) -> Handler:
        async def answer(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
            message, call = self._call(update, " ".join(context.args or []))
            await self._show(message, context.bot, call, await self._commands.run(command.name, call))

        return answer

    async def start(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, call = self._call(update)
        await self._show(message, context.bot, call, self._commands.start(call))

    @staticmethod
    def _call(update: Update, argument: str = "") -> tuple[Message, Call]:
        message, user = update.message, update.effective_user
        assert message is not None and user is not None
        return message, Call(user_of(user), user.full_name, place_of(message.chat), argument)

    async def _show(self, message: Message, bot: Bot, call: Call, reply: Reply | None) -> None:
        """A private answer goes where only the caller reads it; any other stays in the chat it answers."""
        if reply is None:
            return
        keyboard = _keyboard(reply.question)
        if reply.visibility is not Visibility.PRIVATE or call.place.private:
            await send_here(message, reply.whole(), keyboard)
            return
        try:
            await send_to(bot, int(call.user.id), reply.whole(), keyboard)
        except Forbidden:  # Telegram lets a bot message only people who started a chat with it
            await send_here(message, NEEDS_PRIVATE_CHAT)
            return
        await send_here(message, SENT_PRIVATELY)

    async def forget_answer(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        assert query is not None and query.data is not None
        user = user_of(query.from_user)
        if not self._commands.owns(query.data, user):
            await query.answer(NOT_YOUR_BUTTON, show_alert=True)
            return
        await query.answer()
        assert query.message is not None
        call = Call(user, query.from_user.full_name, place_of(query.message.chat))
        await query.edit_message_text(await self._commands.answer(query.data, call))

    async def unknown_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        assert message is not None and message.text is not None
        command = message.text.split()[0]
        # A bare /command in a group may be meant for another bot; answer only what is addressed to us.
        if is_group(message.chat) and not command.lower().endswith(f"@{context.bot.username}".lower()):
            return
        await send_here(message, self._commands.unknown(command).text)

    # --- messages ------------------------------------------------------------------------------

    async def text(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        await self._receive(update, context)

    async def photo(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A photo (or an image sent as a file), with or without a caption: shown to a model that sees."""
        await self._receive(update, context, with_image=True)

    async def voice(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Voice notes cannot be transcribed here (no offline speech-to-text): the pipeline says so."""
        await self._receive(update, context, voice=True)

    async def not_text(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Stickers, files and the like: in a group, people talking to each other; in private, the pipeline says
        the companion cannot read them."""
        await self._receive(update, context, unreadable=True)

    async def _receive(
        self,
        update: Update,
        context: ContextTypes.DEFAULT_TYPE,
        *,
        with_image: bool = False,
        voice: bool = False,
        unreadable: bool = False,
    ) -> None:
        message = update.message
        assert message is not None
        arrival = self._arrival(update, context.bot, with_image=with_image, voice=voice, unreadable=unreadable)
        if arrival is not None:
            await self._pipeline.receive(arrival, TelegramChat(context.bot, message, streaming=self._streaming))

    def arrived(self, update: Update, waits: bool) -> None:
        """`update` arrived, and `waits` for its chat's turn or not: a message the pipeline will store takes its place
        in line now (`MessagePipeline.arrived`); a command, a voice note or a sticker stores nothing. An edit of a
        message still waiting changes what is kept of it at once (the edit itself waits behind it)."""
        if self._bot is None or _from_a_bot(update):  # never answered, so never kept
            return
        if (edited := update.edited_message) is not None and edited.text is not None:
            self._pipeline.changed(source_of(edited), self._words_of(edited, self._bot))
            return
        if update.message is None or _COMMAND.check_update(update):
            return
        with_image = bool(_IMAGE.check_update(update))
        if not (with_image or _TEXT.check_update(update)):
            return
        if (arrival := self._arrival(update, self._bot, with_image=with_image)) is not None:
            self._pipeline.arrived(arrival, waits=waits)

    def _arrival(
        self, update: Update, bot: Bot, *, with_image: bool = False, voice: bool = False, unreadable: bool = False
    ) -> Arrival | None:
        """What arrived with `update`, a new message (None in a channel: nobody to talk to there)."""
        message, user = update.message, update.effective_user
        assert message is not None and user is not None
        if message.chat.type not in (ChatType.PRIVATE, ChatType.GROUP, ChatType.SUPERGROUP):
            return None
        return Arrival(
            user=user_of(user),
            speaker_name=user.full_name,
            place=place_of(message.chat),
            text=self._words_of(message, bot),
            sent_at=message.date,
            addressed=self._addressed(message, bot),
            source_id=source_of(message),
            image=(lambda: self._image_of(message)) if with_image else None,
            voice=voice,
            unreadable=unreadable,
        )

    @staticmethod
    def _addressed(message: Message, bot: Bot) -> bool:
        """Whether a group message is meant for the bot: it mentions it or replies to it."""
        replied = message.reply_to_message
        if replied is not None and replied.from_user is not None and replied.from_user.id == bot.id:
            return True
        kinds: list[str | None] = [MessageEntity.MENTION, MessageEntity.TEXT_MENTION]
        mentions = {**message.parse_entities(kinds), **message.parse_caption_entities(kinds)}
        for entity, text in mentions.items():
            if entity.type == MessageEntity.TEXT_MENTION and entity.user is not None and entity.user.id == bot.id:
                return True
            if entity.type == MessageEntity.MENTION and text.lower() == f"@{bot.username}".lower():
                return True
        return False

    @staticmethod
    def _words_of(message: Message, bot: Bot) -> str:
        """The text (or a photo's caption) for the model; in a group without the bot's @mention."""
        text = message.text or message.caption or ""
        if not is_group(message.chat):
            return text
        return re.sub(rf"@{re.escape(bot.username)}\b", "", text, flags=re.IGNORECASE).strip()

    async def _image_of(self, message: Message) -> Image:
        """The photo's bytes, in the smallest size Telegram keeps that is still as large as we show; a file
        beyond the operator's limit is refused before it is downloaded."""
        if message.photo:
            size = _photo_size(message.photo, self._companion.image_side())
            self._companion.check_image_size(size.file_size or 0)
            return Image(bytes(await (await size.get_file()).download_as_bytearray()), "image/jpeg")
        document = message.document
        assert document is not None  # the handler's filter: a photo or an image document
        self._companion.check_image_size(document.file_size or 0)
        data = await (await document.get_file()).download_as_bytearray()
        return Image(bytes(data), document.mime_type or "application/octet-stream")

    async def edited(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """An edited message changes what the conversation remembers; it is not answered again."""
        message = update.edited_message
        assert message is not None
        await self._companion.message_edited(source_of(message), self._words_of(message, context.bot))

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        error = context.error
        if not isinstance(update, Update) or update.effective_message is None:
            log.error("Telegram error outside an update", exc_info=error)
            return
        if isinstance(error, UserFacingError):
            text = str(error)
        else:
            log.error("handling a Telegram update failed", exc_info=error)
            text = phrasebook.SOMETHING_BROKE
        try:
            await send_here(update.effective_message, text)
        except Exception:
            log.exception("could not tell the user about the error")


def _keyboard(question: Question | None) -> InlineKeyboardMarkup | None:
    """A question's answers as buttons in a row."""
    if question is None:
        return None
    buttons = [InlineKeyboardButton(choice.label, callback_data=choice.data) for choice in (question.yes, question.no)]
    return InlineKeyboardMarkup([buttons])


def _photo_size(sizes: tuple[PhotoSize, ...], side: int) -> PhotoSize:
    """The smallest of a photo's sizes whose longer side reaches `side` (the largest if none does)."""
    large_enough = [size for size in sizes if max(size.width, size.height) >= side]
    if large_enough:
        return min(large_enough, key=lambda size: size.width * size.height)
    return max(sizes, key=lambda size: size.width * size.height)
