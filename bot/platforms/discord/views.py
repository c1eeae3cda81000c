"""The buttons of the companion's answers on Discord: pages of a long private answer, and the yes and no of a
forget question.

A forget button is a `DynamicItem`: its custom id is the answer's data (`forget:yes:<user>`, ...), from which
discord.py builds the button again whenever one is pressed. So an answer is taken after a restart, or by
another process (the stored `/forget <what>` question is shared), and never waits for a view kept in memory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Self

import discord
from discord.ext import commands

from bot.platforms.commands import FORGET_ANSWER, NOT_YOUR_BUTTON, Call, ChatCommands, Choice, Question
from bot.platforms.discord.places import place_of, user_of
from core import phrasebook

COG = "CompanionCog"  # the cog whose commands answer the buttons
PAGE_CHARS = 1800  # a page of a long answer, leaving room for its footer under Discord's 2,000
PAGE_SECONDS = 300


class MemoryPages(discord.ui.View):
    """A long private answer (`/memory`), one page at a time; only the person who asked turns the pages."""

    def __init__(self, owner_id: int, pages: Sequence[str]) -> None:
        super().__init__(timeout=PAGE_SECONDS)
        self.owner_id = owner_id
        self.pages = list(pages) or [phrasebook.NOTHING_REMEMBERED]
        self.index = 0
        if len(self.pages) == 1:
            self.clear_items()

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        if interaction.user.id != self.owner_id:
            await interaction.response.send_message(NOT_YOUR_BUTTON, ephemeral=True)
            return False
        return True

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


class ForgetButton(discord.ui.DynamicItem[discord.ui.Button[discord.ui.View]], template=FORGET_ANSWER):
    """One answer to a forget question; only the person who asked may press it."""

    def __init__(self, choice: Choice, *, style: discord.ButtonStyle = discord.ButtonStyle.secondary) -> None:
        super().__init__(discord.ui.Button(label=choice.label, style=style, custom_id=choice.data))

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction, item: discord.ui.Item[Any], match: re.Match[str], /
    ) -> Self:
        assert isinstance(item, discord.ui.Button)
        return cls(Choice(item.label or "", match.string), style=item.style)

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        if ChatCommands.owns(self.custom_id, user_of(interaction.user)):
            return True
        await interaction.response.send_message(NOT_YOUR_BUTTON, ephemeral=True)
        return False

    async def callback(self, interaction: discord.Interaction) -> None:
        await interaction.response.defer()  # forgetting may take longer than Discord waits for an answer
        call = Call(user_of(interaction.user), interaction.user.display_name, place_of(interaction.channel))  # type: ignore[arg-type]
        text = await _chat_commands(interaction).answer(self.custom_id, call)
        await interaction.edit_original_response(content=text, view=None)


def _chat_commands(interaction: discord.Interaction) -> ChatCommands:
    """The chat commands of the bot the button was pressed on (its companion's cog holds them)."""
    bot = interaction.client
    cog = bot.get_cog(COG) if isinstance(bot, commands.Bot) else None
    found = getattr(cog, "chat_commands", None)
    assert isinstance(found, ChatCommands), "the companion's cog answers its buttons"
    return found


class ForgetQuestion(discord.ui.View):
    """The yes and no of a forget question; answered for as long as the question lasts, by whichever process."""

    def __init__(self, question: Question) -> None:
        super().__init__(timeout=None)
        self.yes = ForgetButton(question.yes, style=discord.ButtonStyle.danger)
        self.no = ForgetButton(question.no)
        self.add_item(self.yes)
        self.add_item(self.no)
