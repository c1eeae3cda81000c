"""The Telegram adapter: a python-telegram-bot `Application` whose handlers turn an `Update` into an
`IncomingMessage` and render the `TurnResult`. All memory logic stays in core/.

Private chats: every text message and photo is answered. Groups: only messages that mention the bot
(@username) or reply to it, or every message in the chats the operator chose. Memory scope is (persona,
Telegram user); the conversation is the chat, whose persona the operator's rules decide. Replies are sent
as plain text (no parse mode), split at 4,096, and grow while they are written (`bot.platforms.streaming`): a draft
in private chats, a message edited in groups. Every call goes through `FloodControl` (flood limits delay
a reply, never drop it).
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
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
from telegram.constants import ChatAction, ChatType
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

from bot.app import App
from bot.platforms.render import TELEGRAM_LIMIT, split_message
from bot.platforms.streaming import MonotonicTimer, ReplySurface, Timer, Typing, stream_reply
from bot.platforms.telegram.flood_control import BEST_EFFORT, FloodControl
from bot.platforms.telegram.reply import DraftReply, EditedReply
from bot.platforms.telegram.update_processor import PerChatUpdateProcessor
from bot.routing import Router
from core import phrasebook
from core.checkins import RecipientRefusedError
from core.errors import UserFacingError
from core.reply.images import check_size
from core.types import Image, IncomingMessage
from knowledge.records import Scope

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.telegram.org"
HELP = (
    "Talk to me in a private chat, or mention me (or reply to me) in a group.\n"
    "/new - start a fresh conversation\n"
    "/memory - what I remember about you\n"
    "/forget - forget everything about you (asks first)\n"
    "/share - what I may bring up in groups: by default only what was said there; "
    "/share <id> shares one memory, /share on everything\n"
    "/timezone Area/City - your time zone (Europe/Berlin, Asia/Shanghai), so I know your day\n"
    "/checkins on|off - whether I may write to you first now and then (in our private chat)\n"
    "/help - this help"
)
COMMANDS = (
    BotCommand("new", "start a fresh conversation"),
    BotCommand("memory", "what I remember about you"),
    BotCommand("forget", "forget everything about you"),
    BotCommand("share", "what I may bring up in groups (on, off, or a memory id)"),
    BotCommand("timezone", "your time zone, e.g. Europe/Berlin"),
    BotCommand("checkins", "whether I may write to you first (on or off)"),
    BotCommand("help", "how to talk to me"),
)
SENT_PRIVATELY = "I've answered you in a private message."
NEEDS_PRIVATE_CHAT = "I can't message you privately yet: open a private chat with me, press Start, and ask there."
CHECKINS_PRIVATE_ONLY = "Check-ins happen in our private chat: send /checkins on or off to me there."
NOT_TEXT = "I can read text and look at photos, but stickers and files don't reach me. Could you write it?"
EXPIRED = "This question has expired; send /forget again."
NOT_YOUR_BUTTON = "This button belongs to whoever asked; send /forget yourself to forget what I know about you."
TYPING_REFRESH = 4.5  # seconds; Telegram shows "typing" for about five seconds per action
# Seconds between updates of a growing reply: about one a second per chat, and in groups, where a bot may
# send 20 messages a minute, every three seconds.
PRIVATE_PACE = 1.0
GROUP_PACE = 3.0
# Callback data (at most 64 bytes): the answer, the id of the user who asked, and for `/forget <what>`
# the key of the memory ids shown to them.
_FORGET_DATA = re.compile(r"^forget:(yes|no|some):(-?\d+)(?::([0-9a-f]{16}))?$")


def build_telegram_application(
    app: App,
    token: str,
    base_url: str = DEFAULT_BASE_URL,
    *,
    polling: bool = True,
    timer: Timer | None = None,
) -> Application:  # type: ignore[type-arg]
    """A PTB `Application` talking to `base_url` (Telegram, a self-hosted Bot API server, or a fake).

    `polling=False` builds it without an updater, for feeding updates with `process_update`; `timer`
    paces growing replies (tests pass one that does not really wait).
    """
    base_url = base_url.rstrip("/")
    builder = (
        ApplicationBuilder()
        .token(token)
        .base_url(f"{base_url}/bot")
        .base_file_url(f"{base_url}/file/bot")
        # many chats at once, each one in order (across processes too, in server mode)
        .concurrent_updates(PerChatUpdateProcessor(order=app.turn_order("telegram:")))
        .rate_limiter(FloodControl())
    )
    if not polling:
        builder = builder.updater(None)
    application = builder.build()
    TelegramAdapter(app, app.router("telegram"), timer or MonotonicTimer()).register(application)
    return application


@dataclass(frozen=True, slots=True)
class Webhook:
    """Telegram posts updates to `url` (a proxy forwards them to `listen`:`port`), each with `secret`."""

    url: str
    listen: str = "127.0.0.1"
    port: int = 8443
    secret: str | None = None


async def run_telegram(
    app: App, token: str, base_url: str = DEFAULT_BASE_URL, *, webhook: Webhook | None = None
) -> None:
    """Poll Telegram, or serve a webhook, until cancelled (Ctrl-C); the caller starts and closes the app."""
    application = build_telegram_application(app, token, base_url)
    async with application:
        await application.bot.set_my_commands(COMMANDS)
        await application.start()
        outbox = start_checkins(app, application)
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
            app.companion.checkins.remove_outbox(outbox)
            await application.updater.stop()
            if isinstance(application.update_processor, PerChatUpdateProcessor):
                abandoned = application.update_processor.abandon()  # their messages are stored already
                if abandoned:
                    log.warning("stopping: abandoned %d updates in progress", abandoned)
            await application.stop()


class TelegramOutbox:
    """Check-ins leave through the application's bot (its flood control included), to private chats only."""

    def __init__(self, bot: Bot) -> None:
        self._bot = bot

    def reaches(self, user_id: str) -> bool:
        return user_id.startswith("telegram:")

    async def deliver(self, user_id: str, conversation_id: str, text: str) -> None:
        chat_id = int(conversation_id.rsplit(":", 1)[1])  # telegram:chat:<id>, a private chat's id is the user's
        try:
            await _send_to(self._bot, chat_id, text, None)
        except Forbidden as error:  # "bot was blocked by the user", "user is deactivated", ...
            raise RecipientRefusedError(error.message) from error


def start_checkins(app: App, application: Application) -> TelegramOutbox:  # type: ignore[type-arg]
    """Send check-ins through this (initialized) application from now on, starting with those already due."""
    outbox = TelegramOutbox(application.bot)
    app.companion.checkins.add_outbox(outbox)
    app.companion.checkins.dispatch()
    return outbox


class TelegramAdapter:
    """Thin handlers: translate, call the companion, render."""

    def __init__(self, app: App, router: Router, timer: Timer) -> None:
        self._companion = app.companion
        self._router = router
        self._timer = timer
        self._streaming = app.settings.telegram_streaming
        self._image_limits = app.settings.image_limits
        # `/forget <what>` questions awaiting an answer: key -> what was shown. Lost on restart
        # (the button then says the question expired), which errs on the side of deleting nothing.

    def register(self, application: Application) -> None:  # type: ignore[type-arg]
        # Group -1 runs first: updates from bots (including ourselves) stop here, unanswered.
        application.add_handler(TypeHandler(Update, self._drop_bots), group=-1)
        new_messages = filters.UpdateType.MESSAGE
        application.add_handler(CommandHandler(["start", "help"], self.help, filters=new_messages))
        application.add_handler(CommandHandler("new", self.new, filters=new_messages))
        application.add_handler(CommandHandler("memory", self.memory, filters=new_messages))
        application.add_handler(CommandHandler("forget", self.forget, filters=new_messages))
        application.add_handler(CommandHandler("share", self.share, filters=new_messages))
        application.add_handler(CommandHandler("timezone", self.timezone, filters=new_messages))
        application.add_handler(CommandHandler("checkins", self.checkins, filters=new_messages))
        application.add_handler(CallbackQueryHandler(self.forget_answer, pattern=_FORGET_DATA))
        application.add_handler(MessageHandler(new_messages & filters.COMMAND, self.unknown_command))
        application.add_handler(MessageHandler(new_messages & filters.TEXT, self.text))
        application.add_handler(MessageHandler(new_messages & (filters.PHOTO | filters.Document.IMAGE), self.photo))
        application.add_handler(MessageHandler(new_messages & (filters.VOICE | filters.VIDEO_NOTE), self.voice))
        application.add_handler(MessageHandler(filters.UpdateType.EDITED_MESSAGE & filters.TEXT, self.edited))
        application.add_handler(MessageHandler(new_messages & ~filters.TEXT & ~filters.StatusUpdate.ALL, self.not_text))
        application.add_error_handler(self._on_error)

    # --- helpers -------------------------------------------------------------

    def _persona_id(self, chat_id: int) -> str:
        return self._router.persona_for([chat_id])

    def _scope(self, user_id: int, chat_id: int) -> Scope:
        """The user's own scope under the persona of this chat: commands never reach anyone else's."""
        return Scope(self._persona_id(chat_id), f"telegram:{user_id}")

    @staticmethod
    def _is_group(message: Message) -> bool:
        return message.chat.type in (ChatType.GROUP, ChatType.SUPERGROUP)

    @staticmethod
    async def _send(message: Message, text: str) -> None:
        """Plain text (no parse mode: model output can never break formatting), split at Telegram's limit."""
        group = TelegramAdapter._is_group(message)
        for index, chunk in enumerate(split_message(text, TELEGRAM_LIMIT)):
            # In a group the first chunk quotes the message it answers, so it is clear whom we answer.
            await message.reply_text(chunk, do_quote=group and index == 0)

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

    def _words_of(self, message: Message, bot: Bot) -> str:
        """The text (or a photo's caption) for the model; in a group without the bot's @mention."""
        text = message.text or message.caption or ""
        if not self._is_group(message):
            return text
        return re.sub(rf"@{re.escape(bot.username)}\b", "", text, flags=re.IGNORECASE).strip()

    async def _allowed(self, message: Message, user_id: int) -> bool:
        """The operator's allow-lists; a refused private chat is told so, a group stays quiet."""
        private = message.chat.type == ChatType.PRIVATE
        if self._router.rules.allows(user_id, [message.chat.id], direct=private):
            return True
        if private:
            await self._send(message, phrasebook.NOT_ALLOWED)
        return False

    def _typing(self, message: Message, bot: Bot) -> Typing:
        """Shows "typing…" while the reply is prepared, until its first words show; best effort."""

        async def send() -> None:
            await bot.send_chat_action(message.chat.id, ChatAction.TYPING, rate_limit_args=BEST_EFFORT)  # type: ignore[call-arg]

        return Typing(send, refresh=TYPING_REFRESH)

    async def _answer(self, message: Message, bot: Bot, incoming: IncomingMessage, group: bool) -> None:
        """Answer one message: the reply grows in a draft (private) or an edited message (group), paced."""
        surface: ReplySurface = EditedReply(bot, message) if group else DraftReply(bot, message.chat.id)
        pace = (GROUP_PACE if group else PRIVATE_PACE) if self._streaming else None
        async with self._typing(message, bot) as typing:
            result = await self._companion.handle(incoming, group=group)
            await stream_reply(
                result.reply, surface, limit=TELEGRAM_LIMIT, interval=pace, timer=self._timer, on_visible=typing.stop
            )

    # --- handlers ------------------------------------------------------------

    async def _drop_bots(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        user = update.effective_user
        if user is None or user.is_bot:
            raise ApplicationHandlerStop

    async def help(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None
        if update.message.text and update.message.text.split()[0].lower().startswith("/start"):
            greeting = self._companion.greeting(self._persona_id(update.message.chat.id))
            await self._send(update.message, f"{greeting}\n\n{HELP}")
            return
        await self._send(update.message, HELP)

    async def new(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, user = update.message, update.effective_user
        assert message is not None and user is not None
        if not await self._allowed(message, user.id):
            return
        greeting = await self._companion.new_conversation(
            self._persona_id(message.chat.id), f"telegram:chat:{message.chat.id}"
        )
        await self._send(message, greeting)

    async def memory(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, user = update.message, update.effective_user
        assert message is not None and user is not None
        listing = await self._companion.memory_listing(self._scope(user.id, message.chat.id))
        await self._privately(message, context.bot, user.id, listing)

    async def timezone(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, user = update.message, update.effective_user
        assert message is not None and user is not None
        answer = await self._companion.time_zone(self._scope(user.id, message.chat.id), " ".join(context.args or []))
        await self._privately(message, context.bot, user.id, answer)  # where someone lives is theirs to tell

    async def checkins(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """`/checkins [on|off]`, in a private chat only: that is where check-ins go."""
        message, user = update.message, update.effective_user
        assert message is not None and user is not None
        if message.chat.type != ChatType.PRIVATE:
            await self._send(message, CHECKINS_PRIVATE_ONLY)
            return
        scope = self._scope(user.id, message.chat.id)
        answer = await self._companion.checkins_command(
            scope, " ".join(context.args or []), private_conversation=f"telegram:chat:{message.chat.id}"
        )
        await self._send(message, answer)

    async def share(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, user = update.message, update.effective_user
        assert message is not None and user is not None
        answer = await self._companion.share(self._scope(user.id, message.chat.id), " ".join(context.args or []))
        await self._privately(message, context.bot, user.id, answer)  # it may quote a memory

    async def forget(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message, user = update.message, update.effective_user
        assert message is not None and user is not None
        if context.args:
            await self._forget_about(message, context.bot, user.id, " ".join(context.args))
            return
        keyboard = InlineKeyboardMarkup(
            [
                [
                    InlineKeyboardButton("Yes, forget everything", callback_data=f"forget:yes:{user.id}"),
                    InlineKeyboardButton("No, keep it", callback_data=f"forget:no:{user.id}"),
                ]
            ]
        )
        await message.reply_text(
            phrasebook.forget_everything_question(user.full_name),
            reply_markup=keyboard,
            do_quote=self._is_group(message),
        )

    async def _privately(
        self, message: Message, bot: Bot, user_id: int, text: str, keyboard: InlineKeyboardMarkup | None = None
    ) -> None:
        """Answer where only the caller reads it: here in a private chat; from a group, in their private chat."""
        if not self._is_group(message):
            await _send_to(bot, message.chat.id, text, keyboard)
            return
        try:
            await _send_to(bot, user_id, text, keyboard)
        except Forbidden:  # Telegram lets a bot message only people who started a chat with it
            await self._send(message, NEEDS_PRIVATE_CHAT)
            return
        await self._send(message, SENT_PRIVATELY)

    async def _forget_about(self, message: Message, bot: Bot, user_id: int, what: str) -> None:
        scope = self._scope(user_id, message.chat.id)
        plan = await self._companion.forgetting.find(scope, what)
        if not plan.found:
            await self._send(message, phrasebook.nothing_about(what))
            return
        key = await self._companion.forgetting.ask(plan)  # the answer may reach another process
        keyboard = InlineKeyboardMarkup(
            [
                [
                    InlineKeyboardButton("Yes, forget these", callback_data=f"forget:some:{user_id}:{key}"),
                    InlineKeyboardButton("No, keep them", callback_data=f"forget:no:{user_id}:{key}"),
                ]
            ]
        )
        question = f"{phrasebook.remembered(plan.found)}\n\n{phrasebook.forget_question(plan.found)}"
        await self._privately(message, bot, user_id, question, keyboard)

    async def forget_answer(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        query = update.callback_query
        assert query is not None and query.data is not None
        matched = _FORGET_DATA.match(query.data)
        assert matched is not None  # the handler's pattern guarantees it
        answer, owner, key = matched.group(1), int(matched.group(2)), matched.group(3)
        if query.from_user.id != owner:
            await query.answer(NOT_YOUR_BUTTON, show_alert=True)
            return
        await query.answer()
        if answer == "no":
            if key:
                await self._companion.forgetting.declined(key)
            await query.edit_message_text(phrasebook.FORGETTING_NOTHING)
            return
        if answer == "some":
            # the scope asked about, even when the question was answered in another chat than the group's
            forgotten = await self._companion.forgetting.answered(key, f"telegram:{owner}") if key else None
            if forgotten is None:
                await query.edit_message_text(EXPIRED)
                return
            await query.edit_message_text(phrasebook.forgot(forgotten.memories + forgotten.messages))
            return
        assert query.message is not None
        report = await self._companion.forgetting.everything(self._scope(owner, query.message.chat.id))
        await query.edit_message_text(
            phrasebook.forgot_everything(report.memories, report.messages, about=query.from_user.full_name)
        )

    async def unknown_command(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        assert message is not None and message.text is not None
        command = message.text.split()[0]
        # A bare /command in a group may be meant for another bot; answer only what is addressed to us.
        if self._is_group(message) and not command.lower().endswith(f"@{context.bot.username}".lower()):
            return
        await self._send(message, f"I don't know the command {command}.\n\n{HELP}")

    async def not_text(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        message = update.message
        assert message is not None
        if message.chat.type == ChatType.PRIVATE:
            await self._send(message, NOT_TEXT)
        # in groups, stickers and files are people talking to each other: stay quiet

    async def text(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        await self._converse(update, context)

    async def photo(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A photo (or an image sent as a file), with or without a caption: shown to a model that sees."""
        await self._converse(update, context, with_image=True)

    async def _converse(self, update: Update, context: ContextTypes.DEFAULT_TYPE, *, with_image: bool = False) -> None:
        message, user = update.message, update.effective_user
        assert message is not None and user is not None
        group = self._is_group(message)
        if message.chat.type not in (ChatType.PRIVATE, ChatType.GROUP, ChatType.SUPERGROUP):
            return  # channels: nobody to talk to
        if not await self._allowed(message, user.id):
            return
        addressed = self._addressed(message, context.bot) or self._router.rules.every_message_in([message.chat.id])
        if group and not addressed:
            return
        if await self._companion.already_received(_source_of(message)):
            return  # delivered again: a webhook retried, or polling resumed before the update was confirmed
        incoming = IncomingMessage(
            conversation_id=f"telegram:chat:{message.chat.id}",
            user_id=f"telegram:{user.id}",
            speaker_name=user.full_name,
            text=self._words_of(message, context.bot),
            sent_at=message.date,
            persona_id=self._persona_id(message.chat.id),
            source_id=_source_of(message),
            image=await self._image_of(message) if with_image else None,
        )
        await self._answer(message, context.bot, incoming, group)

    async def _image_of(self, message: Message) -> Image:
        """The photo's bytes, in the smallest size Telegram keeps that is still as large as we show; a file
        beyond the operator's limit is refused before it is downloaded."""
        if message.photo:
            size = _photo_size(message.photo, self._image_limits.max_side)
            check_size(size.file_size or 0, self._image_limits)
            return Image(bytes(await (await size.get_file()).download_as_bytearray()), "image/jpeg")
        document = message.document
        assert document is not None  # the handler's filter: a photo or an image document
        check_size(document.file_size or 0, self._image_limits)
        data = await (await document.get_file()).download_as_bytearray()
        return Image(bytes(data), document.mime_type or "application/octet-stream")

    async def voice(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Voice notes cannot be transcribed here (no offline speech-to-text): say so where it was meant for us."""
        message = update.message
        assert message is not None
        if not self._is_group(message) or self._addressed(message, context.bot):
            await self._send(message, phrasebook.CANT_HEAR_VOICE)

    async def edited(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """An edited message changes what the conversation remembers; it is not answered again."""
        message = update.edited_message
        assert message is not None
        await self._companion.message_edited(_source_of(message), self._words_of(message, context.bot))

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
            await self._send(update.effective_message, text)
        except Exception:
            log.exception("could not tell the user about the error")


async def _send_to(bot: Bot, chat_id: int, text: str, keyboard: InlineKeyboardMarkup | None) -> None:
    """Plain text split at Telegram's limit; the buttons go with the last part."""
    chunks = split_message(text, TELEGRAM_LIMIT)
    for index, chunk in enumerate(chunks):
        await bot.send_message(chat_id=chat_id, text=chunk, reply_markup=keyboard if index == len(chunks) - 1 else None)


def _photo_size(sizes: tuple[PhotoSize, ...], side: int) -> PhotoSize:
    """The smallest of a photo's sizes whose longer side reaches `side` (the largest if none does)."""
    large_enough = [size for size in sizes if max(size.width, size.height) >= side]
    if large_enough:
        return min(large_enough, key=lambda size: size.width * size.height)
    return max(sizes, key=lambda size: size.width * size.height)


def _source_of(message: Message) -> str:
    return f"telegram:{message.chat.id}:{message.message_id}"  # message ids are unique per chat only
