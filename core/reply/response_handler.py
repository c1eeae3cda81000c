"""ResponseHandler: one reply, from the stored user message to the stored answer.

The user's message is written to working memory before anything can fail, so an LLM error, a
crash or a restart never loses it; the reply is stored once it has been generated completely.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from core import phrasebook
from core.clock import Clock
from core.errors import LLMError
from core.llm.client import LLMClient, count_tokens
from core.reply.images import ImageError, ImageLimits, clean_description, description_request, photo_text, prepare_image
from core.reply.prompt import MessageTooLongError, Prompt, PromptBuilder
from core.reply.recall_tool import RECALL, RecallContext, RecallTool, RecallTurn, room_for
from core.reply.system_memories import system_records
from core.reply.time_context import TurnTime
from core.types import ChatMessage, IncomingMessage, RecallTrace, StoredTurn, ToolCall, TurnResult
from knowledge.conversations.history import ConversationHistory
from knowledge.conversations.working_memory import WorkingMemory
from knowledge.dates.windows import TimeWindow, find_window
from knowledge.errors import storage_problem
from knowledge.journal.ongoing_threads import OngoingThread, OngoingThreads
from knowledge.journal.profiles import Profiles
from knowledge.journal.reply_traces import ReplyTrace, ReplyTraces
from knowledge.memory.store import KnowledgeBase
from knowledge.records import Category, MemoryRecord, Scope, StoredMessage, new_message_id
from knowledge.rules.chapters import inside, window_length
from knowledge.rules.decay import MemoryPolicy, PolicyFor, default_policy
from knowledge.rules.discretion import Audience
from knowledge.rules.ranking import rank_for_prompt
from knowledge.rules.temporal import episode_moment, in_prompt, in_window
from personas.loader import Persona

log = logging.getLogger(__name__)

# The embedder reads about 512 tokens; a longer query only costs time.
MAX_QUERY_CHARS = 2000
# "What did we talk about last time?": the latest episodes before this conversation, whatever their words.
LAST_TIME_EPISODES = 2
# The summary of the conversation so far, once its start has left the window: its first episode (how it began)
# and the latest, this many in all.
SO_FAR_EPISODES = 3
WINDOW_CHAPTERS = 4  # a time named brings its chapters first: a month's and its weeks', say
# With the `recall` tool offered, the prompt leaves this much of the budget for the tool's definition
# and what its calls bring back.
RECALL_RESERVE = 600


class ResponseHandler:
    """Keeps working memory and produces the reply to each message."""

    def __init__(
        self,
        *,
        working_memory: WorkingMemory,
        knowledge: KnowledgeBase,
        history: ConversationHistory,
        llm: LLMClient,
        prompt_builder: PromptBuilder,
        clock: Clock,
        retrieval_limit: int = 8,
        excerpt_limit: int = 3,
        image_limits: ImageLimits | None = None,
        policy_for: PolicyFor = default_policy,
        profiles: Profiles | None = None,
        threads: OngoingThreads | None = None,
        traces: ReplyTraces | None = None,
        idle_timeout: timedelta = timedelta(minutes=30),
    ) -> None:
        """`excerpt_limit`: past messages from `history` quoted at most, when memories do not cover them;
        `profiles`: each user's profile, always in their prompt where the audience may read it; `threads`: what is
        going on in their life, in the prompt's Now section;
        `image_limits`: the largest photo accepted, and the size it is scaled to for the model;
        `policy_for`: a persona's memory rules (when a past plan leaves the prompt); `traces`: where each
        answered turn's trace is kept (ids, tokens, timings), if anywhere;
        `idle_timeout`: the pause that ends a conversation (its summary so far stays in its prompt until then)."""
        self.working_memory = working_memory
        self.image_limits = image_limits or ImageLimits()
        self._knowledge = knowledge
        self._llm = llm
        self._prompt_builder = prompt_builder
        self._clock = clock
        self._degraded = False  # the memory server was out of reach at the last retrieval (said once)
        self._retrieval_limit = retrieval_limit
        self._history = history
        self._excerpt_limit = excerpt_limit
        self._policy_for = policy_for
        self._recall_tool = RecallTool(knowledge, history)
        self._profiles = profiles
        self._threads = threads
        self._traces = traces
        self._idle_timeout = idle_timeout
        # when `/new` last closed each conversation in this process; after a restart the pause rule alone ends one
        self._closed: dict[tuple[str, str], datetime] = {}

    async def reply(
        self,
        persona: Persona,
        scope: Scope,
        message: IncomingMessage,
        *,
        group: bool,
        audience: Audience | None = None,
        zone: tzinfo = UTC,
        message_id: str | None = None,
        on_end: Callable[[StoredTurn | None], None] = lambda stored: None,
    ) -> TurnResult:
        """Store the message (as `message_id`, if given), build the prompt, and return the streamed reply.

        The prompt holds only the memories and past messages `audience` may hear of (None: in a group,
        what was learned there or marked shared); its time is the user's, in `zone`, and a time the
        message names ("yesterday") is where memories and past messages come from. `on_end` is told once
        that the turn is over: with what it stored once the stream has been consumed and the answer stored
        (also kept as `TurnResult.stored`), or with None when no answer was stored (the message was refused, the model
        failed or said nothing, the stream was dropped, the reply could not be written).
        """
        audience = audience if audience is not None else Audience.of(message.conversation_id, group=group)
        try:
            return await self._reply(
                persona, scope, message, group, audience, zone, message_id or new_message_id(), on_end
            )
        except BaseException:
            on_end(None)
            raise

    async def _reply(
        self,
        persona: Persona,
        scope: Scope,
        message: IncomingMessage,
        group: bool,
        audience: Audience,
        zone: tzinfo,
        message_id: str,
        on_end: Callable[[StoredTurn | None], None],
    ) -> TurnResult:
        started = time.perf_counter()
        try:
            photo = await self._photo_of(persona, message)
        except ImageError as error:
            on_end(None)
            return _refused(message, str(error))
        # a photo the model cannot see: the caption is still answered, after saying so
        preface = phrasebook.CANT_SEE_IMAGES_READ_CAPTION if message.image is not None and photo is None else None
        incoming = StoredMessage(
            id=message_id,
            persona_id=persona.id,
            conversation_id=message.conversation_id,
            user_id=scope.user_id,
            role="user",
            speaker_name=message.speaker_name,
            content=stored_text(message),
            sent_at=message.sent_at,
            in_group=group,
        )
        try:
            self._prompt_builder.check_fits(persona, incoming, group=group, image_url=photo.url if photo else None)
        except MessageTooLongError as error:
            on_end(None)
            return _refused(message, str(error))
        stored = self.store_message(persona.id, scope, message, group=group, message_id=incoming.id)
        window = self.working_memory.window(persona.id, message.conversation_id)
        when = self._turn_time(scope, message, stored, window, zone)
        so_far = await asyncio.to_thread(self._so_far, scope, audience, window)
        if so_far:  # the conversation began before its window: "last time" is before its first episode
            when = replace(when, conversation_start=min(when.conversation_start, episode_moment(so_far[0])))
        policy = self._policy_for(persona.id)
        always, retrieved = await self._recall(persona, scope, message.text, audience, when, policy)
        shown = [*always, *so_far, *retrieved]
        excerpts = await self._excerpts(scope, message.text, window, shown, audience, when.window)
        profile = await asyncio.to_thread(self._profile_for, scope, audience)
        threads = await asyncio.to_thread(self._threads_for, scope, audience)
        with_tools = self._llm.settings("chat").chosen(persona.models.get("chat")).tools
        try:
            prompt = self._prompt_builder.build(
                persona,
                window=window,
                always=always,
                retrieved=retrieved,
                excerpts=excerpts,
                group=group,
                image_url=photo.url if photo else None,
                when=when,
                policy=policy,
                reserved=RECALL_RESERVE if with_tools else 0,
                profile=profile,
                threads=threads,
                so_far=so_far,
            )
        except MessageTooLongError as error:  # lore the earlier messages bring in left no room: refused after all
            await asyncio.to_thread(self.working_memory.log.forget_messages, scope, [stored.id])
            on_end(None)
            return _refused(message, str(error))
        dropped = {record.id for record in prompt.dropped_memories}
        # what the chat model actually saw, so the monitor can judge which memories were used
        shown_ids = tuple(
            dict.fromkeys(record.id for record in shown if record.category != "system" and record.id not in dropped)
        )
        recall = None
        if with_tools:
            title = persona.title_for(message.speaker_name)
            sources = (message_id for record in shown for message_id in record.message_ids)
            held = {*shown_ids, *sources, *(message.id for message in [*window, *excerpts])}
            room = room_for(self._prompt_builder.budget.prompt_tokens, prompt.tokens)
            recall = RecallTurn(self._recall_tool, RecallContext(scope, audience, when, policy, title, held), room)
        result = TurnResult(message.conversation_id, reply="", notice=preface)
        draft = _TraceDraft(started, tuple(excerpt.id for excerpt in excerpts), len(window))
        result.reply = self._stream(persona, scope, stored, prompt, shown_ids, result, on_end, photo, recall, draft)
        return result

    def store_message(
        self, persona_id: str, scope: Scope, message: IncomingMessage, *, group: bool, message_id: str | None = None
    ) -> StoredMessage:
        """Write a user's message to working memory (before anything else can fail), as `message_id` if given."""
        return self.working_memory.append(
            persona_id,
            message.conversation_id,
            role="user",
            user_id=scope.user_id,
            speaker_name=message.speaker_name,
            content=stored_text(message),
            sent_at=message.sent_at,
            source_id=message.source_id,
            in_group=group,
            message_id=message_id,
        )

    def _turn_time(
        self, scope: Scope, message: IncomingMessage, stored: StoredMessage, window: list[StoredMessage], zone: tzinfo
    ) -> TurnTime:
        """The turn's time in the user's zone: now, their previous message, and the time the message names."""
        now = message.sent_at.astimezone(zone)
        previous = self.working_memory.log.previous_from_user(scope, stored.id)
        return TurnTime(
            now=now,
            previous=None if previous is None else previous.sent_at,
            new_conversation=all(earlier.id == stored.id for earlier in window),
            conversation_start=window[0].sent_at if window else stored.sent_at,
            window=find_window(message.text[:MAX_QUERY_CHARS], now),
        )

    def conversation_closed(self, persona_id: str, conversation_id: str) -> None:
        """`/new` ended the conversation: what was said before stays out of its summary so far."""
        self._closed[(persona_id, conversation_id)] = self._clock.now()

    def _so_far(self, scope: Scope, audience: Audience, window: list[StoredMessage]) -> list[MemoryRecord]:
        """The summary of this conversation so far, oldest first: of the episodes written of its messages that left
        the window, back to its start (`/new`, or a pause longer than the idle timeout), the first and the latest ones,
        `SO_FAR_EPISODES` in all. Only this conversation's own: in a group, the group's, which it may hear of."""
        first = window[0]
        closed = self._closed.get((first.persona_id, first.conversation_id))
        found: list[MemoryRecord] = []
        try:
            episodes = [
                record
                for record in self._knowledge.memories(scope, categories=["episode"])
                if record.conversation_id == first.conversation_id
                and episode_moment(record) < first.sent_at
                and audience.may_use(record)
            ]
            later = first.sent_at  # when the stretch after the episode looked at began
            for episode in sorted(episodes, key=episode_moment, reverse=True):
                times = [message.sent_at for message in self.working_memory.log.get(episode.message_ids)]
                ended = max(times, default=None)
                if ended is None or later - ended > self._idle_timeout or (closed is not None and ended <= closed):
                    break  # an earlier conversation, closed by a pause or `/new`
                found.append(episode)
                later = min(times)
        except Exception as error:  # a broken store must not cost the user their reply
            if storage_problem(error) != "unavailable":  # an outage is said once, by the recall that follows
                log.exception("reading the conversation's summary failed for %s; replying without it", scope)
            return []
        if len(found) > SO_FAR_EPISODES:  # how it began, and the latest
            found = [*found[: SO_FAR_EPISODES - 1], found[-1]]
        return found[::-1]

    def _profile_for(self, scope: Scope, audience: Audience) -> str | None:
        """The user's profile, if one is written and `audience` may read it: in a group only a profile whose
        every memory may be used there (docs/concepts/discretion.md#the-profile-and-ongoing-threads)."""
        if self._profiles is None:
            return None
        try:
            profile = self._profiles.get(scope)
            if profile is None or audience.sees_everything:
                return None if profile is None else profile.text
            sources = self._knowledge.get(scope, profile.memory_ids)
        except Exception:  # a broken store must not cost the user their reply
            log.exception("reading the profile failed for %s; replying without it", scope)
            return None
        return profile.text if audience.may_use_derived(profile.memory_ids, sources) else None

    def _threads_for(self, scope: Scope, audience: Audience) -> list[OngoingThread]:
        """The user's ongoing threads `audience` may hear of (in a group, those learned there alone)."""
        if self._threads is None:
            return []
        try:
            return [thread for thread in self._threads.active(scope) if audience.may_hear_of(thread.places)]
        except Exception:  # a broken store must not cost the user their reply
            log.exception("reading the ongoing threads failed for %s; replying without them", scope)
            return []

    async def _photo_of(self, persona: Persona, message: IncomingMessage) -> _Photo | None:
        """The message's photo bounded and ready for the chat model; None when there is none or the model
        cannot see images (then a photo without a caption is refused with a clear answer)."""
        if message.image is None:
            return None
        if not self._llm.settings("chat").chosen(persona.models.get("chat")).vision:
            if not message.text.strip():
                raise ImageError(phrasebook.CANT_SEE_IMAGES)
            return None
        url = await asyncio.to_thread(prepare_image, message.image, self.image_limits)
        return _Photo(url, message.text)

    async def _recall(
        self, persona: Persona, scope: Scope, text: str, audience: Audience, when: TurnTime, policy: MemoryPolicy
    ) -> tuple[list[MemoryRecord], list[MemoryRecord]]:
        """System and core memories (always shown) and the facts and episodes relevant to `text`, of those
        `audience` may hear of and the prompt may show now; a time the message names comes first."""
        query = text[:MAX_QUERY_CHARS]
        try:
            core = await asyncio.to_thread(self._knowledge.memories, scope, categories=["core"])
            hits = await asyncio.to_thread(
                self._knowledge.search,
                scope,
                query,
                limit=self._retrieval_limit,
                categories=["fact", "episode", "chapter"],
                audience=audience,
            )
            found = [hit.record for hit in rank_for_prompt(hits, self._clock.now())]
            if when.window is not None:
                found = await asyncio.to_thread(self._from_window, scope, query, audience, when, found)
        except Exception as error:  # a broken store must not cost the user their reply
            if storage_problem(error) != "unavailable":
                log.exception("memory retrieval failed for %s; replying without memories", scope)
            elif not self._degraded:  # an outage, said once: the conversation still goes into the prompt
                log.warning("degraded: the memory store is out of reach (%s); replying without memories", error)
            self._degraded = storage_problem(error) == "unavailable"
            return system_records(persona), []
        if self._degraded:
            log.warning("the memory store is back: replies recall memories again")
            self._degraded = False

        def shown(record: MemoryRecord) -> bool:
            asked = when.window is not None and not when.window.last_time and in_window(record, when.window)
            return audience.may_use(record) and (asked or in_prompt(record, when.now, policy))

        return system_records(persona) + [record for record in core if shown(record)], list(filter(shown, found))

    def _from_window(
        self, scope: Scope, query: str, audience: Audience, when: TurnTime, found: list[MemoryRecord]
    ) -> list[MemoryRecord]:
        """`found` with the time the message names put first: that window's chapters, its episodes instead of
        any other (for "last time", the latest before this conversation), then the facts learned or dated in it."""
        window = when.window
        assert window is not None
        chapters: list[MemoryRecord] = []
        if window.last_time:
            episodes = self._last_episodes(scope, audience, when)
            facts: list[MemoryRecord] = []
        else:
            chapters = self._chapters_of(scope, audience, window)
            episodes = self._searched(scope, query, audience, "episode", window)
            facts = self._searched(scope, query, audience, "fact", window)
        first = [*chapters, *episodes, *facts]
        chosen = {record.id for record in first}
        rest = [
            record for record in found if record.id not in chosen and not (episodes and record.category == "episode")
        ]
        return [*first, *rest][: self._retrieval_limit]

    def _searched(
        self, scope: Scope, query: str, audience: Audience, category: Category, window: TimeWindow
    ) -> list[MemoryRecord]:
        hits = self._knowledge.search(
            scope,
            query,
            limit=self._retrieval_limit,
            categories=[category],
            audience=audience,
            during=window,
        )
        return [hit.record for hit in hits]

    def _chapters_of(self, scope: Scope, audience: Audience, window: TimeWindow) -> list[MemoryRecord]:
        """The chapters of a window of time: those inside it, the widest first ("in January": January's, then
        its weeks'); if there are none, the one that holds it (a year's, for a month it folded)."""
        found = [
            record
            for record in self._knowledge.memories(scope, categories=["chapter"])
            if audience.may_use(record) and in_window(record, window)
        ]
        within = [record for record in found if inside(record, window.start, window.end)]
        if not within:
            return sorted(found, key=window_length)[:1]
        return sorted(within, key=lambda record: (-window_length(record), record.about or record.created_at))[
            :WINDOW_CHAPTERS
        ]

    def _last_episodes(self, scope: Scope, audience: Audience, when: TurnTime) -> list[MemoryRecord]:
        episodes = [
            record
            for record in self._knowledge.memories(scope, categories=["episode"])
            if audience.may_use(record) and episode_moment(record) < when.conversation_start
        ]
        return sorted(episodes, key=episode_moment, reverse=True)[:LAST_TIME_EPISODES]

    async def _excerpts(
        self,
        scope: Scope,
        text: str,
        window: list[StoredMessage],
        memories: list[MemoryRecord],
        audience: Audience,
        time_window: TimeWindow | None,
    ) -> list[StoredMessage]:
        """Past messages relevant to `text` that the prompt does not already cover (the prompt builder says
        which it covers: the full prompt, the window and the sources of the memories shown)."""
        limit = self._prompt_builder.excerpt_limit
        limit = self._excerpt_limit if limit is None else limit
        if limit <= 0:
            return []
        try:
            hits = await asyncio.to_thread(
                self._history.recall,
                scope,
                text[:MAX_QUERY_CHARS],
                window=time_window,
                limit=limit,
                exclude=self._prompt_builder.covered(window, memories),
                audience=audience,
            )
        except Exception:  # a broken history must not cost the user their reply
            log.exception("history search failed for %s; replying without past messages", scope)
            return []
        return [hit.message for hit in hits]

    async def _stream(
        self,
        persona: Persona,
        scope: Scope,
        stored: StoredMessage,
        prompt: Prompt,
        shown_ids: tuple[str, ...],
        result: TurnResult,
        on_end: Callable[[StoredTurn | None], None],
        photo: _Photo | None,
        recall: RecallTurn | None = None,
        draft: _TraceDraft | None = None,
    ) -> AsyncIterator[str]:
        parts: list[str] = []
        # the photo is described beside the reply, by a task this stream owns
        description = asyncio.create_task(self._describe(persona, photo)) if photo is not None else None
        try:
            try:
                if result.notice:
                    yield result.notice + "\n\n"
                async for piece in self._answer(prompt.messages, persona, recall, result):
                    if draft is not None and draft.first is None:
                        draft.first = time.perf_counter()
                    parts.append(piece)
                    yield piece
            except LLMError as error:
                result.completed = False
                result.notice = phrasebook.apology(error)
                yield ("\n\n" if parts else "") + result.notice
                return
            text = "".join(parts).strip()
            if not text:
                result.completed = False
                result.notice = phrasebook.LOST_WORDS
                yield result.notice
                return
            if description is not None and photo is not None:
                await self._record_photo(stored, photo, await description)
            reply = self.working_memory.append(
                persona.id,
                stored.conversation_id,
                role="assistant",
                user_id=scope.user_id,
                speaker_name=persona.name,
                content=text,
                sent_at=self._clock.now(),
                in_group=stored.in_group,
            )
            recalled = tuple(memory_id for trace in result.recalls for memory_id in trace.memory_ids)
            result.stored = StoredTurn(
                message_id=stored.id,
                reply_id=reply.id,
                reply_text=text,
                shown_ids=shown_ids + recalled,
                recalls=tuple(result.recalls),
            )
            if draft is not None:
                self._keep_trace(persona, scope, reply, prompt.tokens, result.stored, draft)
        except Exception as error:
            if storage_problem(error) is None:
                raise
            log.error("storage unavailable (%s): a reply was sent but could not be stored", storage_problem(error))
        finally:  # answered, failed, or dropped by the caller (the stream closed before its end)
            if description is not None and not description.done():
                description.cancel()  # no answer to keep the photo's description with
            try:
                on_end(result.stored)
            except Exception as error:
                if storage_problem(error) is None:
                    raise
                log.warning("storage unavailable (%s): the turn's background work waits", storage_problem(error))

    def _keep_trace(
        self,
        persona: Persona,
        scope: Scope,
        reply: StoredMessage,
        prompt_tokens: int,
        turn: StoredTurn,
        draft: _TraceDraft,
    ) -> None:
        """Keep what the answered turn's prompt held, by id, with its model, tokens and timings; a trace that
        cannot be kept costs the turn nothing."""
        if self._traces is None:
            return
        ended = time.perf_counter()
        trace = ReplyTrace(
            scope=scope,
            conversation_id=reply.conversation_id,
            message_id=turn.message_id,
            reply_id=turn.reply_id,
            at=reply.sent_at,
            model=self._llm.settings("chat").chosen(persona.models.get("chat")).model,
            prompt_tokens=prompt_tokens,
            completion_tokens=count_tokens(turn.reply_text),
            first_ms=round(((draft.first or ended) - draft.started) * 1000),
            total_ms=round((ended - draft.started) * 1000),
            window_messages=draft.window_messages,
            memory_ids=turn.shown_ids,
            message_ids=draft.excerpt_ids,
            recalls=tuple(_recall_json(call) for call in turn.recalls),
        )
        try:
            self._traces.record(trace)
        except Exception:
            log.exception("the trace of a reply in %s could not be kept", scope)

    async def _answer(
        self, messages: list[ChatMessage], persona: Persona, recall: RecallTurn | None, result: TurnResult
    ) -> AsyncIterator[str]:
        """The model's answer as it is written. Offered the `recall` tool (given `recall`), the model may call
        it instead of answering at once: each call is answered with what it found (kept in `result.recalls`)
        and the model asked again, until it answers or has no calls left. Text comes through as it arrives,
        so an answer that calls nothing is not held back."""
        choice = persona.models.get("chat")
        while True:
            offered = (RECALL,) if recall is not None and recall.calls_left > 0 else ()
            said: list[str] = []
            calls: list[ToolCall] = []
            async for piece in self._llm.stream(messages, role="chat", choice=choice, tools=offered):
                if isinstance(piece, ToolCall):
                    calls.append(piece)
                else:
                    said.append(piece)
                    yield piece
            if not calls or recall is None or not offered:
                return
            answers = []
            for call in calls:
                answers.append(ChatMessage("tool", await asyncio.to_thread(recall.answer, call), tool_call_id=call.id))
                result.recalls.append(recall.traces[-1])
                log.info("recall tool called: %s", recall.traces[-1])
            messages = [*messages, ChatMessage("assistant", "".join(said), tool_calls=tuple(calls)), *answers]

    async def _describe(self, persona: Persona, photo: _Photo) -> str | None:
        """What the photo shows in a sentence, asked of the chat model beside the reply; None if it cannot say."""
        request = description_request(photo.url, photo.caption, persona.language)
        try:
            answer = await self._llm.complete(request, role="chat", choice=persona.models.get("chat"))
        except LLMError:
            log.warning("describing a photo failed; it is kept as [photo] and its caption")
            return None
        return clean_description(answer)

    async def _record_photo(self, stored: StoredMessage, photo: _Photo, description: str | None) -> None:
        """Keep the photo in the conversation, its history and what the monitor reads as its description
        (the image itself is not kept)."""
        if description:
            await asyncio.to_thread(self._history.rewrite, stored.id, photo_text(photo.caption, description))


@dataclass(slots=True)
class _TraceDraft:
    """What a turn's trace needs from before its reply is written: when it began, the earlier messages quoted,
    how many recent messages the prompt held; and when the first words came."""

    started: float
    excerpt_ids: tuple[str, ...]
    window_messages: int
    first: float | None = None


def _recall_json(call: RecallTrace) -> dict[str, Any]:
    window = None if call.window is None else [moment.isoformat() for moment in call.window]
    return {
        "kinds": list(call.kinds),
        "window": window,
        "memory_ids": list(call.memory_ids),
        "message_ids": list(call.message_ids),
        "refused": call.refused,
    }


@dataclass(frozen=True, slots=True)
class _Photo:
    """The photo of the message being answered, as the model sees it, and the words sent with it."""

    url: str  # a JPEG data URL, bounded and downscaled
    caption: str


def stored_text(message: IncomingMessage) -> str:
    """How a message is first stored: its text, or for a photo `[photo]` and its caption until it is described."""
    return message.text if message.image is None else photo_text(message.text, None)


def _refused(message: IncomingMessage, text: str) -> TurnResult:
    """A message answered with `text` instead of the model (too long, an image it cannot take): not stored."""
    return TurnResult(message.conversation_id, reply=text, notice=text, completed=False)
