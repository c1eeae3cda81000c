"""What a search of one scope finds for commands: memories and past messages together
(`search_scope`), and the ones `/forget <what>` matches. The engine itself is `knowledge/search/index.py`;
how hits are ordered in a prompt is `ranking.py`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from knowledge.conversations.history import ConversationHistory, HistoryHit
from knowledge.dates.windows import TimeWindow
from knowledge.forget.target import ForgetTarget
from knowledge.memory.store import KnowledgeBase
from knowledge.records import Category, MemoryRecord, Scope, ScoredMemory, StoredMessage


@dataclass(frozen=True, slots=True)
class SearchResults:
    """What a search of one scope found: memories and past messages, each best first."""

    memories: list[ScoredMemory]
    messages: list[HistoryHit]


def search_scope(
    knowledge: KnowledgeBase,
    history: ConversationHistory | None,
    scope: Scope,
    query: str,
    *,
    limit: int = 10,
    during: TimeWindow | None = None,
) -> SearchResults:
    """Search everything remembered about `scope`, memories (every category) and past messages alike;
    given `during`, only what is from that stretch of time."""
    messages = [] if history is None else history.search(scope, query, limit=limit, during=during)
    return SearchResults(knowledge.search(scope, query, limit=limit, during=during), messages)


# With multilingual-e5-small a short phrase scores up to ~0.87 against unrelated memories ("忘掉前男友":
# 0.86 against "主人最近在学吉他"), so matching by similarity needs a high bar; distinctive content counts too.
DEFAULT_FORGET_SIMILARITY = 0.9
FORGETTABLE: tuple[Category, ...] = ("fact", "core", "episode", "chapter")


def memories_about(
    knowledge: KnowledgeBase,
    scope: Scope,
    phrase: str,
    target: ForgetTarget,
    *,
    min_similarity: float = DEFAULT_FORGET_SIMILARITY,
) -> list[MemoryRecord]:
    """The memories of `scope` about `phrase`: very close in meaning, or carrying what `target` matches."""
    hits = knowledge.search(scope, phrase, limit=20, categories=FORGETTABLE)
    found = {hit.record.id: hit.record for hit in hits if hit.similarity >= min_similarity}
    for record in knowledge.memories(scope, categories=FORGETTABLE):
        if target.matches(record.content):
            found[record.id] = record
    return list(found.values())


def messages_about(messages: Iterable[StoredMessage], target: ForgetTarget) -> list[StoredMessage]:
    """The past messages (of one scope, oldest first) that carry what `target` matches, in their order."""
    return [message for message in messages if target.matches(message.content)]
