"""How the companion answers on Discord: the channel a message arrived in (`DiscordChat`, the pipeline's `Chat`),
and where a reply appears while it grows (`DiscordReply`). Nothing it sends or edits can ping anyone."""

from __future__ import annotations

import discord

from bot.platforms.render import DISCORD_LIMIT, split_message
from bot.platforms.streaming import EditedMessages, Typing

NO_MENTIONS = discord.AllowedMentions.none()
# Discord allows 5 edits of messages in a channel per 5 seconds: 4 paced updates and the final text fit.
EDIT_PACE = 1.25
TYPING_REFRESH = 8.0  # seconds; Discord shows "typing" for about ten seconds


class DiscordChat:
    """The channel a message arrived in: a reply is sent with its first words and edited as it grows, no faster
    than Discord allows; in a server it replies to the message it answers (without a ping)."""

    limit = DISCORD_LIMIT

    def __init__(self, answered: discord.Message, *, streaming: bool) -> None:
        self._answered = answered
        self.pace = EDIT_PACE if streaming else None

    def reply(self) -> DiscordReply:
        return DiscordReply(self._answered)

    async def send(self, text: str) -> None:
        reply = DiscordReply(self._answered)
        for chunk in split_message(text, DISCORD_LIMIT):
            await reply.finish(chunk)

    def typing(self) -> Typing:
        return Typing(self._answered.channel.typing, refresh=TYPING_REFRESH)


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
