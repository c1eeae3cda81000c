"""How a message becomes a reply, the same on every platform.

The operator's allow-lists (a refused private chat is told so, a group stays quiet), whether the
message is meant for the companion (always in private; in a group when it mentions or replies to the
bot, or everywhere in the chats the operator chose), what the companion cannot read or hear, a message
the platform delivered twice (stored, answered and learned from once), the `IncomingMessage`, the
turn, the reply as it grows, and what the person is told when something fails. A platform says only
how it receives (an `Arrival`) and how it sends, edits and shows that it is typing (a `Chat`). While the
database is out of reach, messages wait in `outage.HeldMessages` and are answered, in order, once it is back.
A message waiting for its turn is kept in the spool file meanwhile (a crash does not lose it); at a stop, it is
not answered but stays kept for the next start (`keep_waiting`).
A message deleted or edited on its platform while it waits for its turn is withdrawn or takes its new words
(`changed`): nothing is stored yet for the companion's own edit and delete to reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from bot.ordering import TurnOrder, lock_out_of_reach
from bot.platforms.outage import Held, HeldMessages
from bot.platforms.streaming import MonotonicTimer, ReplySurface, Timer, Typing, stream_reply
from bot.routing import Place, Router
from core import phrasebook
from core.companion import Companion, KeptMessage
from core.errors import UserFacingError
from core.types import Image, IncomingMessage, UserRef
from knowledge.errors import first_line, storage_problem

log = logging.getLogger(__name__)

_STOPPING: ContextVar[bool] = ContextVar("stopping", default=False)


@contextlib.contextmanager
def stopping() -> Iterator[None]:
    """Within this, a message received is kept for the next start, not answered: the process is stopping."""
    token = _STOPPING.set(True)
    try:
        yield
    finally:
        _STOPPING.reset(token)


@dataclass(frozen=True, slots=True)
class PlatformContext:
    """What the composition root hands a platform adapter: the companion, the operator's rules for the platform,
    the order of turns (shared with the other processes serving the same conversations) and whether replies
    grow while they are written."""

    companion: Companion
    router: Router
    order: TurnOrder
    streaming: bool = True
    held: HeldMessages | None = None  # messages waiting out a database outage (by default the pipeline's own)


@dataclass(frozen=True, slots=True)
class Arrival:
    """A message as its platform delivered it, before anyone decided whether to answer it."""

    user: UserRef
    speaker_name: str
    place: Place
    text: str  # the words for the model (in a group, without the bot's own mention)
    sent_at: datetime  # aware, UTC
    addressed: bool = False  # it mentions or replies to the bot (what counts in a group; in private, all is)
    source_id: str | None = None  # the platform's unique message id, for a second delivery, edits and deletes
    image: Callable[[], Awaitable[Image]] | None = None  # fetches the picture sent with it (its size checked first)
    voice: bool = False  # a voice message, which nobody here can listen to
    unreadable: bool = False  # nothing but what the companion cannot read: a sticker, a file


class Chat(Protocol):
    """How a platform answers where a message arrived."""

    limit: int  # the longest message the platform takes, in its units (`render.units`)
    pace: float | None  # seconds between updates of a growing reply; None: each part is sent whole

    def reply(self) -> ReplySurface:
        """Where the reply appears and grows."""
        ...

    async def send(self, text: str) -> None:
        """A whole answer (a refusal, an apology), split at the platform's limit."""
        ...

    def typing(self) -> Typing | None:
        """Shows that the companion is writing, until the reply's first words are visible; None where nothing can."""
        ...


class MessagePipeline:
    """Answers the messages of one platform: `receive` each one with the chat it arrived in."""

    def __init__(
        self,
        companion: Companion,
        router: Router,
        *,
        order: TurnOrder | None = None,
        timer: Timer | None = None,
        held: HeldMessages | None = None,
    ) -> None:
        """`order`: one turn at a time per conversation (None where the platform's updates already come in order);
        `timer` paces growing replies (tests pass one that does not really wait); `held`: where messages wait out
        a database outage, and the turn order they are answered in once it is over (the platform's)."""
        self._companion = companion
        self._router = router
        self.order = order
        self._timer = timer or MonotonicTimer()
        self.held = held if held is not None else HeldMessages(order or TurnOrder())
        self._waiting: set[asyncio.Task[object]] = set()  # receiving a message, not yet in its turn
        self._waiting_ids: dict[str, int] = {}  # the platform ids of the messages waiting for their turn
        self._changes: dict[str, str | None] = {}  # their new words, or None: deleted
        # by platform id, what `arrived` learned: each message's place in line, and what was kept while it waited
        self._arrived: dict[str, tuple[int, KeptMessage | None]] = {}

    async def receive(self, arrival: Arrival, chat: Chat) -> None:
        """Answer `arrival` if it is for the companion; the person is told when it cannot be answered."""
        if (refusal := self._refusal(arrival)) is not None:
            if refusal:
                await chat.send(refusal)
            return
        # its place in line, should it have to wait out an outage or a stop (taken as it arrived, if told then)
        number, kept = self._arrived.pop(arrival.source_id, (None, None)) if arrival.source_id else (None, None)
        number = self.held.number() if number is None else number
        if _STOPPING.get():
            if kept is None:
                self._keep(arrival, number)
            return
        try:
            if self.held.outage:  # the messages held before it come first
                await self._hold(number, arrival, chat, "messages are held")
                return
            away = await self._in_turn(arrival, chat, number)
            if away is not None:
                await self._hold(number, arrival, chat, away)
        finally:
            self._unkeep(kept)  # stored now, or held in memory through an outage

    def arrived(self, arrival: Arrival, *, waits: bool) -> None:
        """Where the platform keeps each conversation's order itself (Telegram's update processor), it tells of each
        message as it arrives, in order, before `receive`: the message takes its place in line now, and one that
        `waits` for its turn (a reply is being written) is kept in the spool file until `receive` stores it, so a
        crash meanwhile does not lose it (the platform will not deliver it again)."""
        source = arrival.source_id
        if source is None or source in self._arrived or self._refusal(arrival) is not None:
            return
        number = self.held.number()
        self._arrived[source] = (number, self._keep(arrival, number) if waits else None)

    def _refusal(self, arrival: Arrival) -> str | None:
        """Why `arrival` is not answered: what its sender is told ("": nothing, as in a group), or None: it is."""
        place = arrival.place
        if not self._router.allows(arrival.user, place):
            return phrasebook.NOT_ALLOWED if place.private else ""
        if not (place.private or arrival.addressed or self._router.answers_every_message(place)):
            return ""
        if arrival.voice:
            return phrasebook.CANT_HEAR_VOICE
        if arrival.unreadable:
            return phrasebook.NOT_TEXT
        return None

    async def _in_turn(self, arrival: Arrival, chat: Chat, number: int) -> str | None:
        """`_turn` once the conversation's earlier messages are answered. A message that has to wait (a reply
        is being written) is kept in the spool file meanwhile, so a crash does not lose it: the next start stores
        it. Cancelled before its turn (a stop), it stays kept, as it stands then (edited or withdrawn)."""
        if self.order is None:  # the platform hands messages over in order
            return await self._turn(arrival, chat)
        task = asyncio.current_task()
        assert task is not None
        self._waiting.add(task)
        kept = self._keep(arrival, number) if self.order.busy(arrival.place.conversation) else None
        try:
            with self._changeable(arrival.source_id):
                try:
                    async with self.order.turn(arrival.place.conversation):
                        self._waiting.discard(task)
                        current = self._as_changed(arrival)  # deleted while it waited: neither stored nor answered
                        try:
                            return None if current is None else await self._turn(current, chat)
                        finally:
                            self._unkeep(kept)  # stored now (kept until then: a crash mid-turn loses nothing)
                except asyncio.CancelledError:  # kept already, with any edit (`changed`), or kept now as it stands
                    if task in self._waiting and kept is None and (current := self._as_changed(arrival)) is not None:
                        self._keep(current, number)
                    raise
        finally:
            self._waiting.discard(task)

    def changed(self, source_id: str, text: str | None) -> None:
        """A message was edited (`text`, its new words) or deleted (None) on its platform: if it is still waiting for
        its turn, it is answered with its new words or withdrawn (stored already, the companion changes it)."""
        if source_id in self._waiting_ids:
            self._changes[source_id] = text
        if source_id in self._waiting_ids or source_id in self._arrived:  # kept on disk meanwhile: there too
            self._companion.kept_message_changed(source_id, text)

    @contextlib.contextmanager
    def _changeable(self, source_id: str | None) -> Iterator[None]:
        """While a message waits for its turn, an edit or delete of it is noted for when it gets there."""
        if source_id is None:
            yield
            return
        self._waiting_ids[source_id] = self._waiting_ids.get(source_id, 0) + 1
        try:
            yield
        finally:
            self._waiting_ids[source_id] -= 1
            if not self._waiting_ids[source_id]:
                del self._waiting_ids[source_id]
                self._changes.pop(source_id, None)

    def _as_changed(self, arrival: Arrival) -> Arrival | None:
        """`arrival` as it stands now: None if deleted while it waited, with its new words if edited."""
        if arrival.source_id is None or arrival.source_id not in self._changes:
            return arrival
        text = self._changes[arrival.source_id]
        return None if text is None else dataclasses.replace(arrival, text=text)

    async def keep_waiting(self) -> int:
        """At a stop: the messages still waiting for their turn are kept for the next start instead of answered
        (they would wait behind a turn the stop abandons). Returns how many."""
        waiting = set(self._waiting)
        for task in waiting:
            task.cancel()
        if waiting:
            await asyncio.wait(waiting)  # each keeps its message as it is cancelled: moments
        return len(waiting)

    async def _turn(self, arrival: Arrival, chat: Chat) -> str | None:
        """Answer `arrival` in its turn; what keeps the database out of reach if it is (the message is not
        answered then), else None (answered, or told why not)."""
        if lock_out_of_reach():
            return "a turn lock could not be taken"
        try:
            await self._answer(arrival, chat)
            return None
        except UserFacingError as error:
            text = str(error)
        except Exception as error:
            if storage_problem(error) == "unavailable":
                return first_line(error)
            log.exception("answering a message failed")
            text = phrasebook.SOMETHING_BROKE
        try:
            await chat.send(text)
        except Exception:
            log.exception("could not tell the user about the error")
        return None

    async def _hold(self, number: int, arrival: Arrival, chat: Chat, cause: str) -> None:
        """Hold `arrival` until the database is back; its sender is told once per outage."""

        async def answer() -> bool:
            async with self.held.order.turn(arrival.place.conversation, retry=True):
                return await self._turn(arrival, chat) is None

        place, keep = arrival.place, functools.partial(self._keep, arrival, number)
        if self.held.hold(Held(number, place.conversation, arrival.user, answer, keep), cause=cause):
            try:
                await chat.send(phrasebook.HELD_UNTIL_BACK)
            except Exception:
                log.exception("could not tell the user their message is held")

    def _keep(self, arrival: Arrival, number: int) -> KeptMessage | None:
        """Keep `arrival`, the `number`th to arrive, in the spool file, stored at the next start unless its turn
        comes first (`_unkeep`)."""
        incoming = self._incoming(arrival, self._persona_at_stop(arrival))
        return self._companion.keep_for_next_start(incoming, group=not arrival.place.private, arrival=number)

    def _unkeep(self, kept: KeptMessage | None) -> None:
        if kept is not None:
            self._companion.unkeep(kept)

    def _persona_at_stop(self, arrival: Arrival) -> str:
        """The persona of the place, or the configured one while the database with the `/persona` choices is away."""
        try:
            return self._router.persona_for(arrival.place.ids)
        except Exception as error:
            if storage_problem(error) is None:
                raise
            return self._router.rules.persona_for(arrival.place.ids) or self._router.default_persona

    @staticmethod
    def _incoming(arrival: Arrival, persona_id: str, image: Image | None = None) -> IncomingMessage:
        place = arrival.place
        return IncomingMessage(
            conversation=place.conversation,
            user=arrival.user,
            speaker_name=arrival.speaker_name,
            text=arrival.text,
            sent_at=arrival.sent_at,
            persona_id=persona_id,
            source_id=arrival.source_id,
            image=image,
        )

    async def _answer(self, arrival: Arrival, chat: Chat) -> None:
        if arrival.source_id is not None and await self._companion.already_received(arrival.source_id):
            return  # delivered again: a webhook retried, polling resumed, a gateway event replayed
        place = arrival.place
        image = await arrival.image() if arrival.image is not None else None
        incoming = self._incoming(arrival, self._router.persona_for(place.ids), image)
        typing = chat.typing()
        async with typing or contextlib.nullcontext():
            result = await self._companion.handle(incoming, group=not place.private)
            await stream_reply(
                result.reply,
                chat.reply(),
                limit=chat.limit,
                interval=chat.pace,
                timer=self._timer,
                on_visible=typing.stop if typing is not None else _nothing,
            )


def _nothing() -> None:
    """Nothing to stop: the platform shows no typing."""
