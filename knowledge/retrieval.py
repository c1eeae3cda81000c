"""What a search of one scope finds for commands: memories and past messages together
(`search_scope`), and the ones `/forget <what>` matches. The engine itself is `search_index.py`;
how hits are ordered in a prompt is `ranking.py`."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .history import ConversationHistory, HistoryHit
from .message_log import StoredMessage
from .records import Category, MemoryRecord, Scope, ScoredMemory
from .store import KnowledgeBase
from .temporal import in_window
from .time_windows import TimeWindow


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
    matching = None if during is None else functools.partial(in_window, window=during)
    return SearchResults(knowledge.search(scope, query, limit=limit, matching=matching), messages)


# With multilingual-e5-small a short phrase scores up to ~0.87 against unrelated memories ("忘掉前男友":
# 0.86 against "主人最近在学吉他"), so matching by similarity needs a high bar; literal mentions count too.
DEFAULT_FORGET_SIMILARITY = 0.9
_FIRST_PERSON = re.compile(r"^(?:(?:my|i'm|i am|i)\s+|我的|我(?!们))", re.IGNORECASE)
FORGETTABLE: tuple[Category, ...] = ("fact", "core", "episode")


def memories_about(
    knowledge: KnowledgeBase, scope: Scope, phrase: str, *, min_similarity: float = DEFAULT_FORGET_SIMILARITY
) -> list[MemoryRecord]:
    """The memories of `scope` about `phrase`: very close in meaning, or mentioning it (for `/forget <what>`)."""
    hits = knowledge.search(scope, phrase, limit=20, categories=FORGETTABLE)
    found = {hit.record.id: hit.record for hit in hits if hit.similarity >= min_similarity}
    phrases = _forms(phrase)
    for record in knowledge.list(scope, categories=FORGETTABLE):
        if any(mentions(record.content, each) for each in phrases):
            found[record.id] = record
    return list(found.values())


def messages_about(history: ConversationHistory, scope: Scope, phrase: str) -> list[StoredMessage]:
    """The past messages of `scope` that mention `phrase` (for `/forget <what>`), oldest first."""
    phrases = _forms(phrase)
    return [message for message in history.messages(scope) if any(mentions(message.content, each) for each in phrases)]


def _forms(phrase: str) -> set[str]:
    """The phrase as typed, and without a leading "my"/"我的" ("my ex Tom" is stored as "…her ex Tom")."""
    core = _FIRST_PERSON.sub("", phrase).strip()
    return {phrase, core} if len(core) >= 2 else {phrase}


def mentions(content: str, phrase: str) -> bool:
    """Whether `content` contains `phrase` literally; whole words only for Latin-script edges."""
    start = r"(?<![A-Za-z0-9])" if phrase[0].isascii() and phrase[0].isalnum() else ""
    end = r"(?![A-Za-z0-9])" if phrase[-1].isascii() and phrase[-1].isalnum() else ""
    return re.search(start + re.escape(phrase) + end, content, re.IGNORECASE) is not None
