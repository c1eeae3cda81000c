"""Helpers around dpytest for the Discord adapter's tests.

dpytest runs the real discord.py client against an in-memory backend (its `FakeHttp`). It does not
record the request payloads (allowed mentions, message references) nor fake interactions, so:
`record_http` wraps its sending calls to keep every payload, and `FakeInteraction` stands in for the
`discord.Interaction` a slash command or button receives (the response calls are what is recorded).
"""

from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import discord
import discord.ext.test as dpytest
from discord.ext.test import backend, factories


@dataclass
class HttpLog:
    """What the bot asked Discord to do, in order: ("typing", channel id) or ("send", payload)."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)  # kinds of call Discord answers with a gateway error

    def sent(self) -> list[dict[str, Any]]:
        return [payload for kind, payload in self.calls if kind == "send"]

    def texts(self) -> list[str]:
        return [payload.get("content") for payload in self.sent()]


def record_http(bot: discord.Client) -> HttpLog:
    log = HttpLog()
    http = bot.http
    send, typing = http.send_message, http.send_typing

    async def send_message(channel_id: int, *, params: Any) -> Any:
        # dpytest's FakeHttp finds the channel in its caller's locals, so hand ours the caller's.
        channel = inspect.currentframe().f_back.f_locals.get("channel")  # type: ignore[union-attr]  # noqa: F841
        log.calls.append(("send", dict(params.payload)))
        return await send(channel_id, params=params)

    async def send_typing(channel_id: int) -> None:
        log.calls.append(("typing", channel_id))
        if "typing" in log.failing:
            raise discord.DiscordServerError(SimpleNamespace(status=502, reason="Bad Gateway"), "Bad Gateway")
        await typing(channel_id)

    http.send_message = send_message  # type: ignore[method-assign]
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
    ) -> None:
        self.id = next(_interaction_ids)
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


async def press(view: discord.ui.View, button: discord.ui.Button[Any], interaction: FakeInteraction) -> None:
    """Press a button as discord.py's view dispatch does: the view's check first, then the callback."""
    if await view.interaction_check(interaction):  # type: ignore[arg-type]
        await button.callback(interaction)  # type: ignore[arg-type]
