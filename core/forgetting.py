"""Forgetting: the one service every route to forgetting calls, and everything it reaches.

Routes: `/forget` (everything, `everything`), `/forget <what>` (`find`, shown to the user, then
`forget`), "forget …" / "忘掉…" typed in chat (`requested`, from the monitor's job), the CLI
(`companion memory forget`: `memories` or `everything`) and a message deleted on its platform
(`message_deleted`). What "forget X" matches is `ForgetTarget`'s rule (codes, names, words, the phrase)
plus meaning for memories (`retrieval.memories_about`).

What a forget reaches, in this order:
1. under the scope's forget fence (background work that began before cannot write it back):
   memories (chromadb and the scope's search snapshot), the messages that carry the text or that a
   forgotten fact was learned from, with their history index entries; the episodes and chapters written
   from any of those (a chapter records its sources), and the chapters written from them; the facts a nightly
   consolidation merged or compressed from any of those (they record their sources); the change log keeps that a
   memory changed and loses what it said; dead letters quoting the text are deleted and pending jobs
   keep a placeholder instead of it (finished jobs keep no text at all: `JobQueue`); the profile, if it was
   written from a forgotten memory or carries the text, is cleared and written again later from what remains;
   ongoing threads learned from a forgotten message or carrying the text are deleted;
2. in the groups the user spoke in, what the companion repeated of it to others (`_forget_echoes`);
3. memory files of the scope that the companion wrote into the data directory (exports, `.bak`), and the
   scope's messages a stop kept in its spool file (`conversations/spool.py`);
4. what the stores' files keep after a delete: chromadb's write-ahead queue, full-text index and free
   pages (`chroma_erasure.py`); SQLite frees with `secure_delete` and the WAL is truncated.
Token usage holds counts per day, role and model, never text, so there is nothing to erase there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from core.memory_editor import MemoryEditor
from core.types import clean_text
from knowledge.conversations.history import ConversationHistory
from knowledge.conversations.spool import MessageSpool
from knowledge.forget.fence import ForgetFence
from knowledge.forget.target import NOTHING, ForgetTarget
from knowledge.journal.journal import Journal
from knowledge.journal.user_settings import UserSettings
from knowledge.memory.chroma_store import ChromaKnowledgeBase
from knowledge.memory.lookup import DEFAULT_FORGET_SIMILARITY, memories_about, messages_about
from knowledge.memory.memory_file import erase_memory_files
from knowledge.records import Category, MemoryRecord, Scope, StoredMessage
from knowledge.rules.consolidation import written_from_memories

log = logging.getLogger(__name__)

LEARNED_FROM: tuple[Category, ...] = ("fact", "core")  # learned from the messages it names
DERIVED: tuple[Category, ...] = ("episode", "chapter")  # written from the messages and memories it names


@dataclass(frozen=True, slots=True)
class ForgetReport:
    """What one forget deleted, layer by layer."""

    memories: int
    messages: int
    journal_rows: int
    files: tuple[Path, ...] = ()
    target: ForgetTarget = NOTHING  # what it erased as text, so work running on can refuse to write it back
    memory_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ForgetPlan:
    """What `/forget <what>` would delete, shown to the user before they confirm."""

    scope: Scope
    what: str
    memories: list[MemoryRecord] = field(default_factory=list)
    messages: list[StoredMessage] = field(default_factory=list)

    @property
    def found(self) -> list[MemoryRecord | StoredMessage]:
        """The memories, then the past messages, as the user is shown them."""
        return [*self.memories, *self.messages]


@dataclass(frozen=True, slots=True)
class ForgetQuestion:
    """`/forget <what>`, asked: the key its answer names, and what the user is shown before answering."""

    key: str
    found: list[MemoryRecord | StoredMessage]


class Forgetting:
    """Forgets for every route, in every place text can live."""

    def __init__(
        self,
        *,
        knowledge: ChromaKnowledgeBase,
        history: ConversationHistory,
        journal: Journal,
        editor: MemoryEditor,
        user_settings: UserSettings,
        fence: ForgetFence,
        now: Callable[[], datetime],
        files: Path | None = None,
        similarity: float = DEFAULT_FORGET_SIMILARITY,
        members: Callable[[str], list[str]] = lambda user_id: [user_id],
    ) -> None:
        """`files`: the data directory, whose memory files (exports, `.bak`) and spooled messages of a forgotten
        scope go too. `members`: the identities of a scope's user (a linked person's, `Links.members`), under
        which the spool keeps what they said."""
        self._knowledge = knowledge
        self._history = history
        self._journal = journal
        self._editor = editor
        self._user_settings = user_settings
        self.fence = fence
        self._now = now
        self._files = files
        self._members = members
        self.similarity = similarity

    # -- routes --------------------------------------------------------------------------------

    async def find(self, scope: Scope, what: str) -> ForgetPlan:
        """`/forget <what>`, first step: the memories and past messages it would delete."""
        return await asyncio.to_thread(self._find, scope, clean_text(what))

    async def forget(self, plan: ForgetPlan, *, actor: str = "user") -> ForgetReport:
        """`/forget <what>`, once confirmed: what was shown, and what matches the same words now
        (work that finished between the question and the answer may have written it again)."""
        return await asyncio.to_thread(self._forget_plan, plan, actor)

    async def ask(self, scope: Scope, what: str) -> ForgetQuestion | None:
        """`/forget <what>`, the question: what it would delete, kept where any process may take the answer
        (a button pressed after a restart, in another process, or the terminal's typed yes); None if nothing
        matches."""
        plan = await self.find(scope, what)
        if not plan.found:
            return None
        key = await asyncio.to_thread(self._journal.forget_requests.ask, plan.scope, plan.what, self._now())
        return ForgetQuestion(key, plan.found)

    async def answered(self, key: str, user_id: str) -> ForgetReport | None:
        """`/forget <what>`, confirmed by `user_id`: what the question `key` found is forgotten, with what
        matches the same words now. None if the question is unknown, expired, answered or someone else's."""
        return await asyncio.to_thread(self._answered, key, user_id)

    async def declined(self, key: str) -> None:
        """`/forget <what>`, declined: the question goes, nothing else."""
        await asyncio.to_thread(self._journal.forget_requests.take, key, self._now())

    async def prune_questions(self) -> int:
        """Delete the forget questions nobody answered in time; returns how many."""
        return await asyncio.to_thread(self._journal.forget_requests.prune, self._now())

    async def everything(self, scope: Scope) -> ForgetReport:
        """`/forget` and `companion memory forget --all`: every memory, message, change, job and file of the scope."""
        return await asyncio.to_thread(self._forget_everything, scope)

    async def memories(self, scope: Scope, ids: Sequence[str], *, actor: str) -> ForgetReport:
        """`companion memory forget <id>…`: these memories, what quotes them, and the messages they came from."""
        return await asyncio.to_thread(self._forget_memories, scope, ids, actor)

    def requested(self, scope: Scope, phrase: str, *, keep: Collection[str] = ()) -> ForgetReport:
        """ "forget …" typed in chat (no confirmation, so only clear matches); the messages in `keep` (the
        request's own, which quote what is forgotten) are left for `request_done`.

        Synchronous: the monitor's job calls it from its worker thread, inside the job's fence ticket. It
        may run twice for one request (a job re-run after a crash): the second finds less, or nothing."""
        plan = self._find(scope, phrase)
        return self._forget(
            scope,
            memory_ids=[record.id for record in plan.memories],
            message_ids=[message.id for message in plan.messages if message.id not in keep],
            target=ForgetTarget.of_phrase(phrase),
            actor="user",
            keep=keep,
        )

    def request_done(self, scope: Scope, phrase: str, message_ids: Sequence[str]) -> ForgetReport:
        """The last step of a "forget …" typed in chat: the request's own messages go, and what quotes them."""
        return self._forget(
            scope, memory_ids=(), message_ids=message_ids, target=ForgetTarget.of_phrase(phrase), actor="user"
        )

    async def message_deleted(self, source_id: str) -> bool:
        """A message deleted on its platform: it, and what quotes what it said, is forgotten."""
        return await asyncio.to_thread(self._forget_deleted_message, source_id)

    # -- the work (one worker thread per forget) -----------------------------------------------

    def _find(self, scope: Scope, what: str) -> ForgetPlan:
        target = ForgetTarget.of_phrase(what)
        memories = memories_about(self._knowledge, scope, what, target, min_similarity=self.similarity)
        return ForgetPlan(scope, what, memories, messages_about(self._history.messages(scope), target))

    def _forget_plan(self, plan: ForgetPlan, actor: str) -> ForgetReport:
        again = self._find(plan.scope, plan.what)
        return self._forget(
            plan.scope,
            memory_ids=[record.id for record in [*plan.memories, *again.memories]],
            message_ids=[message.id for message in [*plan.messages, *again.messages]],
            target=ForgetTarget.of_phrase(plan.what),
            actor=actor,
        )

    def _answered(self, key: str, user_id: str) -> ForgetReport | None:
        asked = self._journal.forget_requests.take(key, self._now())
        if asked is None or asked[0].user_id != user_id:
            return None
        scope, what = asked
        return self._forget_plan(self._find(scope, what), "user")

    def _forget_memories(self, scope: Scope, ids: Sequence[str], actor: str) -> ForgetReport:
        return self._forget(scope, memory_ids=ids, message_ids=(), target=NOTHING, actor=actor)

    def _forget_deleted_message(self, source_id: str) -> bool:
        message = self._history.by_source(source_id)
        if message is None:
            return False
        scope = Scope(message.persona_id, message.user_id)
        report = self._forget(scope, memory_ids=(), message_ids=[message.id], target=NOTHING, actor="user")
        return report.messages > 0

    def _forget(
        self,
        scope: Scope,
        *,
        memory_ids: Iterable[str],
        message_ids: Iterable[str],
        target: ForgetTarget,
        actor: str,
        keep: Collection[str] = (),
    ) -> ForgetReport:
        with self.fence.forgetting(scope):
            stored = self._history.messages(scope)
            records = self._knowledge.get(scope, memory_ids)
            named = self._history.messages_by_id(scope, message_ids)
            # The text of what was named by id is forgotten wherever else it is quoted (an episode, a dead letter).
            quoted = [record.content for record in records] + [message.content for message in named]
            target = target | ForgetTarget.of_texts(quoted)
            everything = self._knowledge.memories(scope, categories=[*LEARNED_FROM, *DERIVED])
            records += [
                record
                for record in everything
                if target.matches(record.content) and record.id not in {known.id for known in records}
            ]
            messages = {message.id for message in named}
            messages.update(message.id for message in messages_about(stored, target))
            messages.update(_sources(records))
            messages.difference_update(keep)
            records += _derived_from(everything, {record.id for record in records} | messages)
            forgotten = self._editor.forget(scope, [record.id for record in records], actor=actor)
            deleted = self._history.forget_messages(scope, messages)
            # a merged fact's sources are gone already; their rows in the change log hold its text too
            erased = {record.id for record in records} | _sources(records)
            journal_rows = self._journal.erase(scope, erased, target, at=self._now(), message_ids=messages | set(keep))
        self._forget_echoes(scope, _groups(stored), target, actor)
        files = self._erase_files(scope, target)
        log.info("forgot %d memories and %d messages of one scope", forgotten, deleted)
        return ForgetReport(forgotten, deleted, journal_rows, files, target, tuple(record.id for record in records))

    def _forget_everything(self, scope: Scope) -> ForgetReport:
        stored = self._history.messages(scope)
        said = ForgetTarget.of_texts(
            message.content for message in stored if message.role == "user" and message.in_group
        )
        with self.fence.forgetting(scope):
            memories = self._knowledge.forget_all(scope)
            messages = self._history.forget(scope)
            journal_rows = self._journal.forget(scope)
            self._user_settings.forget(scope)  # choices such as /share read as their defaults again
        self._forget_echoes(scope, _groups(stored), said, "user")
        files = self._erase_files(scope, None)
        log.info("forgot %d memories, %d messages and %d journal rows of one scope", memories, messages, journal_rows)
        return ForgetReport(memories, messages, journal_rows, files)

    def _forget_echoes(self, scope: Scope, groups: set[str], target: ForgetTarget, actor: str) -> None:
        """What was said to others of what the user forgets, in the groups where the user spoke: the
        companion's replies to them that repeat it, and what their memories learned there keep of it.
        Their own words stay theirs. Each scope is held by its lock alone: taking another scope's fence
        inside this one's could deadlock with a forget running there."""
        if not groups or not target:
            return
        echoes: dict[Scope, list[str]] = {}  # every other user answered there -> the replies that repeat it
        for reply in self._history.replies_in(scope.persona_id, groups):
            if reply.user_id != scope.user_id:
                ids = echoes.setdefault(Scope(reply.persona_id, reply.user_id), [])
                if target.matches(reply.content):
                    ids.append(reply.id)
        for other, replies in echoes.items():
            with self.fence.lock(other):
                learned = [
                    record.id
                    for record in self._knowledge.memories(other)
                    if record.learned_in in groups and target.matches(record.content)
                ]
                forgotten = self._editor.forget(other, learned, actor=actor)
                repeated = self._history.forget_messages(other, replies)
                self._journal.erase(other, set(learned), target, at=self._now())
            if forgotten or repeated:
                log.info("forgot %d memories and %d replies of another scope that repeated it", forgotten, repeated)

    def _erase_files(self, scope: Scope, target: ForgetTarget | None) -> tuple[Path, ...]:
        """What the files keep after the deletes: memory files, chromadb's remnants, SQLite's WAL (and the
        texts this process embedded lately, kept in memory)."""
        self._knowledge.queries.forget()
        self._history.queries.forget()  # the same encoder when the app shares one; forgetting twice is free
        files = () if self._files is None else tuple(erase_memory_files(self._files, scope, target))
        if self._files is not None:
            spool, said = MessageSpool(self._files), target.matches if target is not None else None
            identities = {scope.user_id, *self._members(scope.user_id)}
            if sum(spool.forget(Scope(scope.persona_id, identity), said) for identity in sorted(identities)):
                files += (spool.path,)
        self._knowledge.erase_remnants(target or NOTHING)
        self._history.checkpoint()
        self._journal.checkpoint()
        return files


def _groups(messages: Iterable[StoredMessage]) -> set[str]:
    """The group conversations of these messages."""
    return {message.conversation_id for message in messages if message.in_group}


def _derived_from(records: Iterable[MemoryRecord], gone: set[str]) -> list[MemoryRecord]:
    """The episodes, chapters and merged or compressed facts written from anything in `gone` (message and memory
    ids), and what was written from those, up to the year's chapter: each carries some of what goes, so each goes
    too (the daily chapter pass writes a chapter again from what is left of its window; a merged fact's other
    sources are gone with it, since it took their place)."""
    derived = [
        record
        for record in records
        if (record.category in DERIVED or written_from_memories(record)) and record.id not in gone
    ]
    gone = set(gone)
    found: list[MemoryRecord] = []
    while more := [record for record in derived if record.id not in gone and gone.intersection(record.message_ids)]:
        found += more
        gone.update(record.id for record in more)
    return found


def _sources(records: Iterable[MemoryRecord]) -> set[str]:
    """The messages forgotten facts were learned from (an episode's messages are only its material)."""
    return {message_id for record in records if record.category in LEARNED_FROM for message_id in record.message_ids}
