"""The Discord adapter: a discord.py bot whose cog says what arrived (an `Arrival` for the message pipeline,
a `Call` for the chat commands, one slash command each) and shows what they answer. All memory logic stays
in core/; what to answer, and where, is the same on every platform (`bot.platforms.pipeline`,
`bot.platforms.commands`).

DMs are answered; in servers the bot answers when mentioned or replied to, or every message in the
channels the operator chose. Memory scope is (persona, Discord user); the conversation is the DM,
channel or thread. A reply is sent with its first words and edited as it grows (`reply.py`); discord.py
itself waits out Discord's rate limits (429). Nothing the bot sends can ping anyone: allowed mentions are
off for every message and every edit. An answer only the caller may read is ephemeral. An image
attachment goes to the companion with the message.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import discord
from discord import app_commands
from discord.ext import commands

from bot.platforms.commands import (
    CHECKINS,
    FORGET,
    HELP,
    LINK,
    MEMORY,
    NEW,
    SHARE,
    TIMEZONE,
    UNLINK,
    WHY,
    Call,
    ChatCommands,
    Command,
    Reply,
    Visibility,
    help_text,
)
from bot.platforms.discord.places import PLATFORM, place_of, places_of, source_of, user_of
from bot.platforms.discord.reply import NO_MENTIONS, DiscordChat
from bot.platforms.discord.views import PAGE_CHARS, ForgetButton, ForgetQuestion, MemoryPages
from bot.platforms.pipeline import Arrival, MessagePipeline, PlatformContext
from bot.platforms.render import DISCORD_LIMIT, split_message
from bot.platforms.streaming import MonotonicTimer, Timer
from core import phrasebook
from core.errors import CompanionError, RecipientRefusedError, UserFacingError
from core.types import ConversationRef, Image, UserRef

log = logging.getLogger(__name__)

HELP_TEXT = help_text("Talk to me in a DM, or mention me (or reply to me) in a server.")
ADMINS_ONLY = "Only people who can manage this server can choose my persona."
_ANSWERED_TYPES = (discord.MessageType.default, discord.MessageType.reply)
# The companion has no voice: discord.py's start-up warnings about missing voice libraries are noise.
logging.getLogger("discord.client").addFilter(lambda record: "voice will NOT be supported" not in record.getMessage())


@dataclass(frozen=True, slots=True)
class Shards:
    """Discord sharding: `count` shards in all, of which this process runs `ids` (discord.py's own sharding)."""

    count: int
    ids: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.count < 1 or not self.ids or any(not 0 <= shard < self.count for shard in self.ids):
            raise ValueError(f"shard ids must be between 0 and {self.count - 1}")


def build_discord_bot(
    context: PlatformContext, *, sync_commands: bool = False, shards: Shards | None = None, timer: Timer | None = None
) -> commands.Bot:
    """A bot with the companion's cog; `sync_commands` publishes the slash commands when it logs in, `timer`
    paces growing replies (tests pass one that does not really wait).

    With `shards`, an `AutoShardedBot` running those shards (a process per group of shards)."""
    timer = timer or MonotonicTimer()
    if shards is None:
        return CompanionBot(context, sync_commands=sync_commands, timer=timer)
    return ShardedCompanionBot(
        context, sync_commands=sync_commands, timer=timer, shard_count=shards.count, shard_ids=list(shards.ids)
    )


async def run_discord(context: PlatformContext, token: str, *, shards: Shards | None = None) -> None:
    """Stay connected to Discord until cancelled; a bad token or no connection is a clear error."""
    # Slash commands are global: the process running shard 0 (or the only one) publishes them.
    bot = build_discord_bot(context, sync_commands=shards is None or 0 in shards.ids, shards=shards)
    try:
        async with bot:
            await bot.start(token)
    except discord.LoginFailure as error:
        raise CompanionError("Discord refused the token: check COMPANION_DISCORD_TOKEN") from error
    except (aiohttp.ClientConnectionError, discord.GatewayNotFound) as error:
        raise CompanionError(f"could not reach Discord ({error})") from error


class CompanionBot(commands.Bot):
    """Slash commands and the companion's cog; no text-prefix commands."""

    def __init__(
        self, context: PlatformContext, *, sync_commands: bool = False, timer: Timer | None = None, **options: Any
    ) -> None:
        """`timer` paces growing replies (tests pass one that does not really wait); `options`: more of
        discord.py's client options (the shards of a sharded bot)."""
        intents = discord.Intents.default()
        intents.message_content = True  # privileged: enable "Message Content Intent" for the bot in the portal
        super().__init__(
            command_prefix=commands.when_mentioned,
            intents=intents,
            allowed_mentions=NO_MENTIONS,
            help_command=None,
            **options,
        )
        self._cog = CompanionCog(self, context, timer or MonotonicTimer())
        self._sync_commands = sync_commands

    async def on_message(self, message: discord.Message) -> None:
        """No text commands to process: the cog answers messages."""

    async def close(self) -> None:
        """Stop: the messages still waiting for their turn are kept for the next start, then disconnect."""
        kept = await self._cog.pipeline.keep_waiting()
        if kept:
            log.warning("stopping: %d messages waiting for their turn are kept for the next start", kept)
        await super().close()

    async def setup_hook(self) -> None:
        await self.add_cog(self._cog)
        self.add_dynamic_items(ForgetButton)  # a forget question's buttons answer after a restart too
        if self._sync_commands:
            await self.tree.sync()


class ShardedCompanionBot(CompanionBot, commands.AutoShardedBot):
    """The same bot over several shards in one process (`shard_count`, `shard_ids`)."""


class DiscordOutbox:
    """Check-ins leave as direct messages, with no mention able to ping anyone."""

    def __init__(self, bot: commands.Bot) -> None:
        self._bot = bot

    def reaches(self, user: UserRef) -> bool:
        return user.platform == PLATFORM

    async def deliver(self, user: UserRef, conversation: ConversationRef, text: str) -> None:
        try:
            number = int(user.id)
            recipient = self._bot.get_user(number) or await self._bot.fetch_user(number)
            for chunk in split_message(text, DISCORD_LIMIT):
                await recipient.send(chunk, allowed_mentions=NO_MENTIONS)
        except (discord.Forbidden, discord.NotFound) as error:  # DMs closed, the bot blocked, the user gone
            raise RecipientRefusedError(error.text or type(error).__name__) from error


class CompanionCog(commands.Cog):
    """Thin handlers: say what arrived, and show what the pipeline and the commands answer."""

    def __init__(self, bot: commands.Bot, context: PlatformContext, timer: Timer) -> None:
        self.bot = bot
        self.companion = context.companion
        self.router = context.router
        self.pipeline = MessagePipeline(
            context.companion, context.router, order=context.order, timer=timer, held=context.held
        )
        self.chat_commands = ChatCommands(context.companion, context.router, help=HELP_TEXT, whispers=True)
        self._streaming = context.streaming
        self._outbox = DiscordOutbox(bot)

    async def cog_load(self) -> None:
        self.companion.send_checkins_through(self._outbox)

    async def cog_unload(self) -> None:
        self.companion.stop_checkins_through(self._outbox)

    @commands.Cog.listener()
    async def on_ready(self) -> None:
        """Connected: check-ins already due go out now."""
        self.companion.send_due_checkins()

    # --- messages ------------------------------------------------------------

    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot or message.webhook_id is not None or message.type not in _ANSWERED_TYPES:
            return  # bots (ourselves included), webhooks and system messages are not people talking to us
        text = self._text_of(message)
        picture = next((each for each in message.attachments if _is_image(each)), None)
        arrival = Arrival(
            user=user_of(message.author),
            speaker_name=message.author.display_name,
            place=place_of(message.channel),
            text=text,
            sent_at=message.created_at,
            addressed=self._addressed(message),
            source_id=source_of(message.id),
            image=(lambda: self._image_of(picture)) if picture is not None else None,
            voice=any(each.is_voice_message() for each in message.attachments),
            unreadable=not text and picture is None and bool(message.attachments or message.stickers),
        )
        # discord.py runs events at once; the pipeline stores and answers a conversation's messages in order.
        await self.pipeline.receive(arrival, DiscordChat(message, streaming=self._streaming))

    async def _image_of(self, attachment: discord.Attachment) -> Image:
        """The attachment's bytes; one beyond the operator's limit is refused before it is downloaded."""
        self.companion.check_image_size(attachment.size)
        return Image(await attachment.read(), attachment.content_type or "application/octet-stream")

    @commands.Cog.listener()
    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """An edited message changes what the conversation remembers; it is not answered again."""
        if "content" not in payload.data or payload.message.author.bot:
            return  # embeds resolving, pins and the like change no words
        source_id, text = source_of(payload.message_id), self._text_of(payload.message)
        self.pipeline.changed(source_id, text)  # if it still waits for its turn, it is stored with its new words
        await self.companion.message_edited(source_id, text)

    @commands.Cog.listener()
    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        source_id = source_of(payload.message_id)
        self.pipeline.changed(source_id, None)  # if it still waits for its turn, it is withdrawn
        await self.companion.message_deleted(source_id)

    def _addressed(self, message: discord.Message) -> bool:
        """Whether a server message is meant for the bot: it mentions it or replies to it."""
        me = self.bot.user
        if me is None:
            return False
        if me in message.mentions:
            return True
        replied = message.reference.resolved if message.reference is not None else None
        return isinstance(replied, discord.Message) and replied.author.id == me.id

    def _text_of(self, message: discord.Message) -> str:
        """The words for the model: mentions of people as their names, the bot's own mention removed."""
        text = message.clean_content
        me = message.guild.me if message.guild is not None else self.bot.user
        if me is not None:
            for name in {me.display_name, me.name}:
                text = re.sub(rf"@{re.escape(name)}\b", "", text)
        return text.strip()

    # --- slash commands --------------------------------------------------------

    async def _run(self, interaction: discord.Interaction, command: Command, argument: str = "") -> None:
        call = Call(user_of(interaction.user), interaction.user.display_name, place_of(interaction.channel), argument)  # type: ignore[arg-type]
        await self._show(interaction, await self.chat_commands.run(command.name, call))

    @staticmethod
    async def _show(interaction: discord.Interaction, reply: Reply | None) -> None:
        """A public answer for the channel; any other only for the caller (ephemeral), paged when long."""
        if reply is None:
            return
        if reply.visibility is Visibility.PUBLIC:
            await interaction.response.send_message(reply.text, allowed_mentions=NO_MENTIONS)
            return
        if reply.question is not None:  # one message with the buttons: what was found is cut to a page
            shown = Reply(split_message(reply.text, PAGE_CHARS)[0] if reply.text else "", question=reply.question)
            view = ForgetQuestion(reply.question)
            await interaction.response.send_message(shown.whole(), view=view, ephemeral=True)
            return
        pages = split_message(reply.text, PAGE_CHARS)
        if len(pages) > 1:
            pages_view = MemoryPages(interaction.user.id, pages)
            await interaction.response.send_message(pages_view.current(), view=pages_view, ephemeral=True)
            return
        await interaction.response.send_message(reply.text, ephemeral=True)

    @app_commands.command(name=NEW.name, description=NEW.summary)
    async def new(self, interaction: discord.Interaction) -> None:
        await self._run(interaction, NEW)

    @app_commands.command(name=MEMORY.name, description=MEMORY.summary)
    async def memory(self, interaction: discord.Interaction) -> None:
        await self._run(interaction, MEMORY)

    @app_commands.command(name=WHY.name, description=WHY.summary)
    async def why(self, interaction: discord.Interaction) -> None:
        await self._run(interaction, WHY)

    @app_commands.command(name=TIMEZONE.name, description=TIMEZONE.summary)
    @app_commands.describe(zone=TIMEZONE.argument)
    async def timezone(self, interaction: discord.Interaction, zone: str = "") -> None:
        await self._run(interaction, TIMEZONE, zone)

    @app_commands.command(name=CHECKINS.name, description=CHECKINS.summary)
    @app_commands.describe(setting=CHECKINS.argument)
    async def checkins(self, interaction: discord.Interaction, setting: Literal["on", "off"] | None = None) -> None:
        await self._run(interaction, CHECKINS, setting or "")

    @app_commands.command(name=SHARE.name, description=SHARE.summary)
    @app_commands.describe(setting=SHARE.argument)
    async def share(self, interaction: discord.Interaction, setting: str = "") -> None:
        await self._run(interaction, SHARE, setting)

    @app_commands.command(name=FORGET.name, description=FORGET.summary)
    @app_commands.describe(what=FORGET.argument)
    async def forget(self, interaction: discord.Interaction, what: str | None = None) -> None:
        await self._run(interaction, FORGET, what or "")

    @app_commands.command(name=LINK.name, description=LINK.summary)
    @app_commands.describe(code=LINK.argument)
    async def link(self, interaction: discord.Interaction, code: str = "") -> None:
        await self._run(interaction, LINK, code)

    @app_commands.command(name=UNLINK.name, description=UNLINK.summary)
    async def unlink(self, interaction: discord.Interaction) -> None:
        await self._run(interaction, UNLINK)

    @app_commands.command(name=HELP.name, description=HELP.summary)
    async def help(self, interaction: discord.Interaction) -> None:
        await self._run(interaction, HELP)

    @app_commands.command(name="persona", description="Show or choose who answers in this channel or server")
    @app_commands.guild_only()
    @app_commands.default_permissions(manage_guild=True)
    @app_commands.describe(
        persona="persona id, or 'default' for the configured one (leave empty to see the current one)",
        where="this channel only, or the whole server",
    )
    async def persona(
        self,
        interaction: discord.Interaction,
        persona: str | None = None,
        where: Literal["channel", "server"] = "channel",
    ) -> None:
        # Default permissions hide the command; a server can re-grant it, so the check is repeated here.
        if not interaction.permissions.manage_guild:
            await interaction.response.send_message(ADMINS_ONLY, ephemeral=True)
            return
        places = places_of(interaction.channel)  # type: ignore[arg-type]
        if persona is None:
            current = self.companion.persona(self.router.persona_for(places))
            known = ", ".join(self.companion.persona_ids())
            await interaction.response.send_message(
                f"Here I am {current.name} ({current.id}). Personas: {known}.", ephemeral=True
            )
            return
        chosen = None if persona == "default" else self.companion.persona(persona).id  # unknown ids are refused
        place = places[0] if where == "channel" else places[-1]
        assert self.router.choices is not None  # a platform's router keeps the choices made here
        self.router.choices.set(place, chosen)
        now = self.companion.persona(self.router.persona_for(places))
        await interaction.response.send_message(
            f"From now on {now.name} ({now.id}) answers in this {where}.", ephemeral=True
        )

    @persona.autocomplete("persona")
    async def _persona_ids(self, interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        ids = ["default", *self.companion.persona_ids()]
        return [app_commands.Choice(name=each, value=each) for each in ids if current.lower() in each][:25]

    async def cog_app_command_error(
        self, interaction: discord.Interaction, error: app_commands.AppCommandError
    ) -> None:
        original = getattr(error, "original", error)
        if isinstance(original, UserFacingError):
            text = str(original)
        else:
            log.error("a Discord command failed", exc_info=original)
            text = phrasebook.SOMETHING_BROKE
        send = interaction.followup.send if interaction.response.is_done() else interaction.response.send_message
        await send(text, ephemeral=True)


def _is_image(attachment: discord.Attachment) -> bool:
    return (attachment.content_type or "").startswith("image/")
