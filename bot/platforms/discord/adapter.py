"""The Discord adapter: a discord.py bot whose cog turns messages and slash commands into calls of the
companion and renders the answers. All memory logic stays in core/.

DMs are answered; in servers the bot answers when mentioned or replied to, or every message in the
channels the operator chose. Memory scope is (persona, Discord user); the conversation is the DM,
channel or thread. A reply is sent with its first words and edited as it grows (`bot.platforms.streaming`);
discord.py itself waits out Discord's rate limits (429). Nothing the bot sends can ping anyone: allowed
mentions are off for every message and every edit. An image attachment goes to the companion with the
message.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import discord
from discord import app_commands
from discord.ext import commands

from bot.app import App
from bot.platforms.render import DISCORD_LIMIT, split_message
from bot.platforms.streaming import EditedMessages, MonotonicTimer, Timer, Typing, stream_reply
from bot.routing import Router
from core import phrasebook
from core.checkins import RecipientRefusedError
from core.companion import Companion
from core.errors import CompanionError, UserFacingError
from core.forgetting import ForgetPlan
from core.reply.images import check_size
from core.types import Image, IncomingMessage
from knowledge.records import Scope

log = logging.getLogger(__name__)

NO_MENTIONS = discord.AllowedMentions.none()
NOT_TEXT = "I can read text and look at images, but files and stickers don't reach me. Could you write it?"
ADMINS_ONLY = "Only people who can manage this server can choose my persona."
NOT_YOUR_BUTTON = "These buttons belong to whoever asked; use /forget yourself to forget what I know about you."
EXPIRED = "This question has expired; use /forget again."
PAGE_CHARS = 1800  # a page of /memory, leaving room for its footer under Discord's 2,000
CONFIRM_SECONDS = 300
# Discord allows 5 edits of messages in a channel per 5 seconds: 4 paced updates and the final text fit.
EDIT_PACE = 1.25
TYPING_REFRESH = 8.0  # seconds; Discord shows "typing" for about ten seconds
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
    app: App, *, sync_commands: bool = False, shards: Shards | None = None, timer: Timer | None = None
) -> commands.Bot:
    """A bot with the companion's cog; `sync_commands` publishes the slash commands when it logs in, `timer`
    paces growing replies (tests pass one that does not really wait).

    With `shards`, an `AutoShardedBot` running those shards (a process per group of shards)."""
    timer = timer or MonotonicTimer()
    if shards is None:
        return CompanionBot(app, sync_commands=sync_commands, timer=timer)
    return ShardedCompanionBot(
        app, sync_commands=sync_commands, timer=timer, shard_count=shards.count, shard_ids=list(shards.ids)
    )


async def run_discord(app: App, token: str, *, shards: Shards | None = None) -> None:
    """Stay connected to Discord until cancelled; a bad token or no connection is a clear error."""
    # Slash commands are global: the process running shard 0 (or the only one) publishes them.
    bot = build_discord_bot(app, sync_commands=shards is None or 0 in shards.ids, shards=shards)
    try:
        async with bot:
            await bot.start(token)
    except discord.LoginFailure as error:
        raise CompanionError("Discord refused the token: check DISCORD_TOKEN") from error
    except (aiohttp.ClientConnectionError, discord.GatewayNotFound) as error:
        raise CompanionError(f"could not reach Discord ({error})") from error


class CompanionBot(commands.Bot):
    """Slash commands and the companion's cog; no text-prefix commands."""

    def __init__(self, app: App, *, sync_commands: bool = False, timer: Timer | None = None, **options: Any) -> None:
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
        self._cog = CompanionCog(self, app, app.router("discord"), timer or MonotonicTimer())
        self._sync_commands = sync_commands

    async def on_message(self, message: discord.Message) -> None:
        """No text commands to process: the cog answers messages."""

    async def setup_hook(self) -> None:
        await self.add_cog(self._cog)
        if self._sync_commands:
            await self.tree.sync()


class ShardedCompanionBot(CompanionBot, commands.AutoShardedBot):
    """The same bot over several shards in one process (`shard_count`, `shard_ids`)."""


def places_of(channel: discord.abc.Messageable) -> list[int]:
    """The ids of where a message was sent, most specific first (thread, channel, server); [] for a DM."""
    guild = getattr(channel, "guild", None)
    if guild is None:
        return []
    places = [channel.id]  # type: ignore[attr-defined]
    if isinstance(channel, discord.Thread) and channel.parent_id is not None:
        places.append(channel.parent_id)
    return [*places, guild.id]


def conversation_of(channel: discord.abc.Messageable) -> str:
    if isinstance(channel, discord.Thread):
        return f"discord:thread:{channel.id}"
    if getattr(channel, "guild", None) is None:
        return f"discord:dm:{channel.id}"  # type: ignore[attr-defined]
    return f"discord:channel:{channel.id}"  # type: ignore[attr-defined]


def source_of(message_id: int) -> str:
    return f"discord:{message_id}"  # Discord ids are unique across channels


class DiscordOutbox:
    """Check-ins leave as direct messages, with no mention able to ping anyone."""

    def __init__(self, bot: commands.Bot) -> None:
        self._bot = bot

    def reaches(self, user_id: str) -> bool:
        return user_id.startswith("discord:")

    async def deliver(self, user_id: str, conversation_id: str, text: str) -> None:
        try:
            user_number = int(user_id.split(":", 1)[1])
            user = self._bot.get_user(user_number) or await self._bot.fetch_user(user_number)
            for chunk in split_message(text, DISCORD_LIMIT):
                await user.send(chunk, allowed_mentions=NO_MENTIONS)
        except (discord.Forbidden, discord.NotFound) as error:  # DMs closed, the bot blocked, the user gone
            raise RecipientRefusedError(error.text or type(error).__name__) from error


class CompanionCog(commands.Cog):
    """Thin handlers: translate, call the companion, render."""

    def __init__(self, bot: commands.Bot, app: App, router: Router, timer: Timer) -> None:
        self.bot = bot
        self.companion = app.companion
        self.router = router
        self._order = app.turn_order()  # conversation ids name their platform
        self._timer = timer
        self._pace = EDIT_PACE if app.settings.discord_streaming else None
        self._image_limits = app.settings.image_limits
        self._outbox = DiscordOutbox(bot)

    async def cog_load(self) -> None:
        self.companion.checkins.add_outbox(self._outbox)

    async def cog_unload(self) -> None:
        self.companion.checkins.remove_outbox(self._outbox)

    @commands.Cog.listener()
    async def on_ready(self) -> None:
        """Connected: check-ins already due go out now."""
        self.companion.checkins.dispatch()

    # --- messages ------------------------------------------------------------

    @commands.Cog.listener()
    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot or message.webhook_id is not None or message.type not in _ANSWERED_TYPES:
            return  # bots (ourselves included), webhooks and system messages are not people talking to us
        places = places_of(message.channel)
        direct = not places
        if not self.router.rules.allows(message.author.id, places, direct=direct):
            if direct:
                await message.channel.send(phrasebook.NOT_ALLOWED)
            return
        if not (direct or self._addressed(message) or self.router.rules.every_message_in(places)):
            return
        text = self._text_of(message)
        picture = next((each for each in message.attachments if _is_image(each)), None)
        if any(each.is_voice_message() for each in message.attachments):
            await self._send(message, phrasebook.CANT_HEAR_VOICE)
            return
        if not text and picture is None and (message.attachments or message.stickers):
            await self._send(message, NOT_TEXT)
            return
        # discord.py runs events at once; a conversation's messages are still stored and answered in order.
        async with self._order.turn(conversation_of(message.channel)):
            if await self.companion.already_received(source_of(message.id)):
                return  # a gateway event replayed after a reconnect
            try:
                incoming = IncomingMessage(
                    conversation_id=conversation_of(message.channel),
                    user_id=f"discord:{message.author.id}",
                    speaker_name=message.author.display_name,
                    text=text,
                    sent_at=message.created_at,
                    persona_id=self.router.persona_for(places),
                    source_id=source_of(message.id),
                    image=await self._image_of(picture) if picture is not None else None,
                )
                await self._answer(message, incoming, group=not direct)
                return
            except UserFacingError as error:
                answer = str(error)
            except Exception:
                log.exception("answering a Discord message failed")
                answer = phrasebook.SOMETHING_BROKE
            await self._send(message, answer)

    async def _answer(self, message: discord.Message, incoming: IncomingMessage, *, group: bool) -> None:
        """The reply, sent with its first words and edited as it grows, no faster than Discord allows."""
        async with Typing(message.channel.typing, refresh=TYPING_REFRESH) as typing:
            result = await self.companion.handle(incoming, group=group)
            await stream_reply(
                result.reply,
                DiscordReply(message),
                limit=DISCORD_LIMIT,
                interval=self._pace,
                timer=self._timer,
                on_visible=typing.stop,
            )

    async def _image_of(self, attachment: discord.Attachment) -> Image:
        """The attachment's bytes; one beyond the operator's limit is refused before it is downloaded."""
        check_size(attachment.size, self._image_limits)
        return Image(await attachment.read(), attachment.content_type or "application/octet-stream")

    @commands.Cog.listener()
    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """An edited message changes what the conversation remembers; it is not answered again."""
        if "content" not in payload.data or payload.message.author.bot:
            return  # embeds resolving, pins and the like change no words
        await self.companion.message_edited(source_of(payload.message_id), self._text_of(payload.message))

    @commands.Cog.listener()
    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        await self.companion.message_deleted(source_of(payload.message_id))

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

    @staticmethod
    async def _send(message: discord.Message, text: str) -> None:
        """Split at Discord's limit; in a server the first part replies to the message (without a ping)."""
        reply = DiscordReply(message)
        for chunk in split_message(text, DISCORD_LIMIT):
            await reply.finish(chunk)

    # --- slash commands --------------------------------------------------------

    def _scope(self, interaction: discord.Interaction) -> Scope:
        """The caller's own scope under the persona of this place: commands never reach anyone else's."""
        persona_id = self.router.persona_for(places_of(interaction.channel))  # type: ignore[arg-type]
        return Scope(self.companion.persona(persona_id).id, f"discord:{interaction.user.id}")

    @app_commands.command(name="new", description="Start a fresh conversation here")
    async def new(self, interaction: discord.Interaction) -> None:
        channel = interaction.channel
        places = places_of(channel)  # type: ignore[arg-type]
        if not self.router.rules.allows(interaction.user.id, places, direct=not places):
            await interaction.response.send_message(phrasebook.NOT_ALLOWED, ephemeral=True)
            return
        persona_id = self.router.persona_for(places)
        greeting = await self.companion.new_conversation(persona_id, conversation_of(channel))  # type: ignore[arg-type]
        await interaction.response.send_message(greeting, allowed_mentions=NO_MENTIONS)

    @app_commands.command(name="memory", description="What I remember about you (only you see it)")
    async def memory(self, interaction: discord.Interaction) -> None:
        listing = await self.companion.memory_listing(self._scope(interaction))
        pages = MemoryPages(interaction.user.id, split_message(listing, PAGE_CHARS))
        await interaction.response.send_message(pages.current(), view=pages, ephemeral=True)

    @app_commands.command(name="timezone", description="Your time zone, so I know your day (only you see it)")
    @app_commands.describe(zone="an IANA name such as Europe/Berlin or Asia/Shanghai; leave empty to see yours")
    async def timezone(self, interaction: discord.Interaction, zone: str = "") -> None:
        answer = await self.companion.time_zone(self._scope(interaction), zone)
        await interaction.response.send_message(answer, ephemeral=True)

    @app_commands.command(name="checkins", description="Whether I may write to you first, in DMs (only you see it)")
    @app_commands.describe(setting="on or off; leave empty to see how it stands")
    async def checkins(self, interaction: discord.Interaction, setting: Literal["on", "off"] | None = None) -> None:
        # check-ins go to DMs, so they belong to the user's scope under the DMs' persona, wherever this is asked
        scope = Scope(self.companion.persona(self.router.persona_for([])).id, f"discord:{interaction.user.id}")
        direct = getattr(interaction.channel, "guild", None) is None and interaction.channel is not None
        here = conversation_of(interaction.channel) if direct else None  # type: ignore[arg-type]
        answer = await self.companion.checkins_command(scope, setting or "", private_conversation=here)
        await interaction.response.send_message(answer, ephemeral=True)

    @app_commands.command(name="share", description="What I may bring up in servers (only you see it)")
    @app_commands.describe(
        setting="on/off: everything you told me, anywhere; a memory id from /memory, optionally followed by off"
    )
    async def share(self, interaction: discord.Interaction, setting: str = "") -> None:
        answer = await self.companion.share(self._scope(interaction), setting)
        await interaction.response.send_message(answer, ephemeral=True)

    @app_commands.command(name="forget", description="Forget everything about you, or only what is about something")
    @app_commands.describe(what="only the memories about this (leave empty to forget everything)")
    async def forget(self, interaction: discord.Interaction, what: str | None = None) -> None:
        scope = self._scope(interaction)
        if not what:
            view = ForgetConfirmation(self.companion, scope, interaction, plan=None)
            await interaction.response.send_message(phrasebook.forget_everything_question(), view=view, ephemeral=True)
            return
        plan = await self.companion.forgetting.find(scope, what)
        if not plan.found:
            await interaction.response.send_message(phrasebook.nothing_about(what), ephemeral=True)
            return
        question = split_message(phrasebook.remembered(plan.found), PAGE_CHARS)[0]
        question += f"\n\n{phrasebook.forget_question(plan.found)}"
        view = ForgetConfirmation(self.companion, scope, interaction, plan=plan)
        await interaction.response.send_message(question, view=view, ephemeral=True)

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
            known = ", ".join(self.companion.personas.ids())
            await interaction.response.send_message(
                f"Here I am {current.name} ({current.id}). Personas: {known}.", ephemeral=True
            )
            return
        chosen = None if persona == "default" else self.companion.persona(persona).id  # unknown ids are refused
        place = places[0] if where == "channel" else places[-1]
        self.router.choices.set(place, chosen)
        now = self.companion.persona(self.router.persona_for(places))
        await interaction.response.send_message(
            f"From now on {now.name} ({now.id}) answers in this {where}.", ephemeral=True
        )

    @persona.autocomplete("persona")
    async def _persona_ids(self, interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        ids = ["default", *self.companion.personas.ids()]
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


class DiscordReply(EditedMessages[discord.Message]):
    """Where a reply appears on Discord (a `ReplySurface`): each part is sent with its first words and edited as
    it grows; in a server the first part replies to the message it answers. No send or edit pings anyone."""

    def __init__(self, answered: discord.Message) -> None:
        super().__init__()
        self._answered = answered

    async def _send(self, text: str, *, first: bool) -> discord.Message:
        if first and self._answered.guild is not None:
            return await self._answered.reply(text, mention_author=False, allowed_mentions=NO_MENTIONS)
        return await self._answered.channel.send(text, allowed_mentions=NO_MENTIONS)

    async def _edit(self, sent: discord.Message, text: str, *, final: bool) -> bool:
        await sent.edit(content=text, allowed_mentions=NO_MENTIONS)
        return True


def _is_image(attachment: discord.Attachment) -> bool:
    return (attachment.content_type or "").startswith("image/")


class _OwnedView(discord.ui.View):
    """Buttons only the person who asked may press."""

    def __init__(self, owner_id: int) -> None:
        super().__init__(timeout=CONFIRM_SECONDS)
        self.owner_id = owner_id

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        if interaction.user.id != self.owner_id:
            await interaction.response.send_message(NOT_YOUR_BUTTON, ephemeral=True)
            return False
        return True


class MemoryPages(_OwnedView):
    """`/memory`, one page at a time."""

    def __init__(self, owner_id: int, pages: Sequence[str]) -> None:
        super().__init__(owner_id)
        self.pages = list(pages) or [phrasebook.NOTHING_REMEMBERED]
        self.index = 0
        if len(self.pages) == 1:
            self.clear_items()

    def current(self) -> str:
        """The page shown now, with the buttons set for it."""
        footer = f"\n\n(page {self.index + 1} of {len(self.pages)})" if len(self.pages) > 1 else ""
        self.previous.disabled = self.index == 0
        self.next.disabled = self.index == len(self.pages) - 1
        return self.pages[self.index] + footer

    @discord.ui.button(label="Previous", style=discord.ButtonStyle.secondary)
    async def previous(self, interaction: discord.Interaction, button: discord.ui.Button[MemoryPages]) -> None:
        self.index = max(self.index - 1, 0)
        await interaction.response.edit_message(content=self.current(), view=self)

    @discord.ui.button(label="Next", style=discord.ButtonStyle.secondary)
    async def next(self, interaction: discord.Interaction, button: discord.ui.Button[MemoryPages]) -> None:
        self.index = min(self.index + 1, len(self.pages) - 1)
        await interaction.response.edit_message(content=self.current(), view=self)


class ForgetConfirmation(_OwnedView):
    """Yes / No for `/forget` (everything, when `plan` is None) and `/forget <what>` (what the plan found)."""

    def __init__(
        self, companion: Companion, scope: Scope, asked: discord.Interaction, *, plan: ForgetPlan | None
    ) -> None:
        super().__init__(asked.user.id)
        self.companion = companion
        self.scope = scope
        self.asked = asked
        self.plan = plan

    async def on_timeout(self) -> None:
        try:
            await self.asked.edit_original_response(content=EXPIRED, view=None)
        except discord.HTTPException:  # the question was dismissed meanwhile: nothing to update
            pass

    @discord.ui.button(label="Yes, forget", style=discord.ButtonStyle.danger)
    async def yes(self, interaction: discord.Interaction, button: discord.ui.Button[ForgetConfirmation]) -> None:
        self.stop()
        await interaction.response.defer()  # forgetting may take longer than Discord waits for an answer
        if self.plan is None:
            report = await self.companion.forgetting.everything(self.scope)
            text = phrasebook.forgot_everything(report.memories, report.messages)
        else:
            report = await self.companion.forgetting.forget(self.plan)
            text = phrasebook.forgot(report.memories + report.messages)
        await interaction.edit_original_response(content=text, view=None)

    @discord.ui.button(label="No, keep it", style=discord.ButtonStyle.secondary)
    async def no(self, interaction: discord.Interaction, button: discord.ui.Button[ForgetConfirmation]) -> None:
        self.stop()
        await interaction.response.edit_message(content=phrasebook.FORGETTING_NOTHING, view=None)
