"""Helpers around dpytest for the Discord adapter's tests.

`started_bot` sets the companion's bot up as at login, and `configure` lets dpytest run it. dpytest runs
the real discord.py client against an in-memory backend (its `FakeHttp`). It does not record the request
payloads (allowed mentions, message references) nor fake interactions, so: `record_http` wraps its
sending and editing calls to keep every payload, and `FakeInteraction` stands in for the
`discord.Interaction` a slash command or button receives (the response calls are what is recorded);
`press_custom_id` presses a button as discord.py dispatches one that no view in memory knows.
`message_with_file` sends a message with an attachment (an image, a voice message), which dpytest's own
`message()` cannot describe (no content type, no size).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import discord
import discord.ext.test as dpytest
from discord.ext import commands
from discord.ext.test import backend, factories

from bot.platforms.discord.adapter import build_discord_bot
from bot.platforms.pipeline import PlatformContext
from tests.fakes.clock import FakeTimer


async def started_bot(context: PlatformContext, timer: FakeTimer | None = None) -> commands.Bot:
    """The companion's bot, set up as at login (its cog and its buttons registered), without a gateway."""
    bot = build_discord_bot(context, timer=timer or FakeTimer())
    await bot._async_setup_hook()  # the event loop parts discord.py sets up at login
    await bot.setup_hook()
    bot._connection.loop = asyncio.get_running_loop()  # set at login, which dpytest skips (typing needs it)
    return bot


def configure(bot: commands.Bot, *members: str) -> None:
    """dpytest runs `bot`, in a server with these members."""
    # dpytest's members exist only in a member cache, which Discord fills only with the members intent.
    bot._connection._intents.members = True
    bot._connection.member_cache_flags = discord.MemberCacheFlags.all()
    registered = list(bot._connection._view_store._dynamic_items.values())
    dpytest.configure(bot, members=list(members))
    bot.add_dynamic_items(*registered)  # dpytest's connection state starts without the bot's buttons


@dataclass
class HttpLog:
    """What the bot asked Discord to do, in order: ("typing", channel id), ("send", payload) or ("edit",
    payload with the edited message's id under "message_id"). Each listener hears of every call as made."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    sent_ids: list[int] = field(default_factory=list)  # the id of each sent message, in the order sent
    listeners: list[Callable[[str, Any], None]] = field(default_factory=list)
    # kinds of call Discord refuses: "typing" with a gateway error, "send" with 403 (a user whose DMs are closed)
    failing: set[str] = field(default_factory=set)

    def record(self, kind: str, payload: Any) -> None:
        self.calls.append((kind, payload))
        for listener in self.listeners:
            listener(kind, payload)

    def sent(self) -> list[dict[str, Any]]:
        return [payload for kind, payload in self.calls if kind == "send"]

    def edits(self) -> list[dict[str, Any]]:
        return [payload for kind, payload in self.calls if kind == "edit"]

    def texts(self) -> list[str]:
        return [payload.get("content") for payload in self.sent()]

    def final_texts(self) -> list[str]:
        """What each sent message says in the end, after its edits: what a person reads once a reply is done."""
        texts = dict(zip(self.sent_ids, self.texts(), strict=True))
        for edit in self.edits():
            texts[edit["message_id"]] = edit["content"]
        return list(texts.values())


def record_http(bot: discord.Client) -> HttpLog:
    log = HttpLog()
    http = bot.http
    send, edit_message, typing = http.send_message, http.edit_message, http.send_typing

    async def send_message(channel_id: int, *, params: Any) -> Any:
        # dpytest's FakeHttp finds the channel in its caller's locals, so hand ours the caller's.
        channel = inspect.currentframe().f_back.f_locals.get("channel")  # type: ignore[union-attr]  # noqa: F841
        log.record("send", dict(params.payload))
        if "send" in log.failing:
            raise discord.Forbidden(
                SimpleNamespace(status=403, reason="Forbidden"), "Cannot send messages to this user"
            )
        sent = await send(channel_id, params=params)
        log.sent_ids.append(int(sent["id"]))
        return sent

    async def edit(channel_id: int, message_id: int, **fields: Any) -> Any:
        # dpytest finds the edited message as `self` in its caller's locals, so hand ours the caller's.
        self = inspect.currentframe().f_back.f_locals.get("self")  # type: ignore[union-attr]  # noqa: F841
        log.record("edit", {"message_id": message_id, **dict(fields["params"].payload)})
        return await edit_message(channel_id, message_id, **fields)

    async def send_typing(channel_id: int) -> None:
        log.record("typing", channel_id)
        if "typing" in log.failing:
            raise discord.DiscordServerError(SimpleNamespace(status=502, reason="Bad Gateway"), "Bad Gateway")
        await typing(channel_id)

    http.send_message = send_message  # type: ignore[method-assign]
    http.edit_message = edit  # type: ignore[method-assign]
    http.send_typing = send_typing  # type: ignore[method-assign]
    return log


async def reply_to(replied: discord.Message, content: str, member: discord.Member) -> discord.Message:
    """A member's message that replies to `replied` (dpytest's `message()` cannot make replies)."""
    channel = replied.channel
    data = factories.make_message_dict(
        channel,
        member,
        content=content,
        guild_id=channel.guild.id,
        mentions=[],
        mention_roles=[],  # type: ignore[union-attr]
    )
    data["type"] = discord.MessageType.reply.value
    data["message_reference"] = {"message_id": replied.id, "channel_id": channel.id, "guild_id": channel.guild.id}  # type: ignore[union-attr]
    data["referenced_message"] = factories.dict_from_message(replied)
    backend.get_state().parse_message_create(data)
    await dpytest.run_all_events()
    return backend.get_state()._get_message(int(data["id"]))  # type: ignore[return-value]


async def message_with_file(
    content: str,
    file: Path,
    *,
    channel: discord.abc.Messageable,
    member: discord.Member,
    content_type: str,
    voice: bool = False,
) -> discord.Message:
    """`member` sends `content` with `file` attached (read back from disk, as from Discord's CDN); `voice`
    makes it a voice message, as Discord marks one (a duration and a waveform)."""
    data: dict[str, Any] = {
        "id": next(_attachment_ids),
        "filename": file.name,
        "size": file.stat().st_size,
        "url": str(file),
        "proxy_url": "",
        "content_type": content_type,
    }
    if voice:
        data.update(duration_secs=3.0, waveform="AAAA")
    guild = getattr(channel, "guild", None)
    message = factories.make_message_dict(
        channel,  # type: ignore[arg-type]
        member,
        content=content,
        guild_id=guild.id if guild is not None else None,  # type: ignore[arg-type]
        mentions=[],
        mention_roles=[],
    )
    message["attachments"] = [data]  # as the gateway sends it (dpytest's own factory drops a voice message's marks)
    backend.get_state().parse_message_create(message)
    await dpytest.run_all_events()
    return backend.get_state()._get_message(int(message["id"]))  # type: ignore[return-value]


_attachment_ids = itertools.count(9_000)


async def edit(message: discord.Message, content: str) -> None:
    """The author edits their message, as the gateway reports it."""
    data = factories.dict_from_message(message)
    data.update(content=content, channel_id=message.channel.id)
    if message.guild is not None:
        data["guild_id"] = message.guild.id
    backend.get_state().parse_message_update(data)
    await dpytest.run_all_events()


@dataclass
class Response:
    """One answer to an interaction: a new message, or an edit of the one holding the buttons."""

    kind: str  # "message", "edit", "defer"
    content: str | None = None
    ephemeral: bool = False
    view: discord.ui.View | None = None
    allowed_mentions: discord.AllowedMentions | None = None


class FakeInteractionResponse:
    def __init__(self, log: list[Response]) -> None:
        self._log = log
        self._done = False

    def is_done(self) -> bool:
        return self._done

    async def send_message(
        self,
        content: str | None = None,
        *,
        ephemeral: bool = False,
        view: discord.ui.View | None = None,
        allowed_mentions: discord.AllowedMentions | None = None,
    ) -> None:
        assert not self._done, "an interaction can be answered once"
        self._done = True
        self._log.append(Response("message", content, ephemeral, view, allowed_mentions))

    async def edit_message(self, *, content: str | None = None, view: discord.ui.View | None = None) -> None:
        assert not self._done, "an interaction can be answered once"
        self._done = True
        self._log.append(Response("edit", content, view=view))

    async def defer(self, **_: Any) -> None:
        assert not self._done, "an interaction can be answered once"
        self._done = True
        self._log.append(Response("defer"))


_interaction_ids = itertools.count(1)


class FakeInteraction:
    """What a slash command or button callback reads from its `discord.Interaction`."""

    def __init__(
        self,
        user: discord.abc.User,
        channel: discord.abc.Messageable,
        *,
        manage_guild: bool = False,
        log: list[Response] | None = None,
        client: discord.Client | None = None,
    ) -> None:
        """`client`: the bot it reaches (by default the one dpytest runs)."""
        self.id = next(_interaction_ids)
        self.client = client or dpytest.get_config().client
        self.user = user
        self.channel = channel
        self.guild = getattr(channel, "guild", None)
        self.permissions = discord.Permissions(manage_guild=manage_guild)
        self.log: list[Response] = [] if log is None else log
        self.response = FakeInteractionResponse(self.log)

    @property
    def followup(self) -> FakeInteraction:
        return self

    async def send(self, content: str, *, ephemeral: bool = False) -> None:
        self.log.append(Response("message", content, ephemeral))

    async def edit_original_response(self, *, content: str | None = None, view: discord.ui.View | None = None) -> None:
        self.log.append(Response("edit", content, view=view))


async def press(view: discord.ui.View, button: discord.ui.Item[Any], interaction: FakeInteraction) -> None:
    """Press a button as discord.py's view dispatch does: the button's and the view's checks, then the callback."""
    if await button.interaction_check(interaction) and await view.interaction_check(interaction):  # type: ignore[arg-type]
        await button.callback(interaction)  # type: ignore[arg-type]


async def press_custom_id(custom_id: str, interaction: FakeInteraction) -> None:
    """Press a button of a message sent earlier (maybe by another process, or before a restart), by its custom id:
    as discord.py dispatches it to the dynamic items `interaction.client` registered, with no view in memory."""
    store = interaction.client._connection._view_store  # type: ignore[attr-defined]
    for pattern, factory in store._dynamic_items.items():
        if (match := pattern.fullmatch(custom_id)) is not None:
            item = await factory.from_custom_id(interaction, discord.ui.Button(custom_id=custom_id), match)
            if await item.interaction_check(interaction):
                await item.callback(interaction)
            return
    raise AssertionError(f"no dynamic item answers {custom_id!r}")
