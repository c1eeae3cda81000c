"""Why the companion said what it said: a reply's trace with what its ids stand for, read in the trace's scope.

The trace keeps ids only (`knowledge/journal/reply_traces.py`); the memories and earlier messages they name
are looked up here, in the same scope, so nothing of another user can appear and a memory forgotten since
shows as gone. `/why` puts the last one in plain words; the console shows each.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo

from knowledge.conversations.message_log import MessageLog
from knowledge.journal.reply_traces import ReplyTrace, ReplyTraces
from knowledge.memory.store import KnowledgeBase
from knowledge.records import MemoryRecord, Scope, StoredMessage

NO_TRACE = "I have no record of a recent reply to you, so I cannot say what I had in mind."


@dataclass(frozen=True, slots=True)
class Explained:
    """A reply's trace, with the memories and earlier messages it names that are still there."""

    trace: ReplyTrace
    memories: list[MemoryRecord]
    messages: list[StoredMessage]
    gone: int  # memories and messages named that were forgotten since
    exchange: list[StoredMessage]  # the message answered and the reply, while they are stored


class Why:
    """Reads the traces of a scope's replies back into what they stood for."""

    def __init__(self, traces: ReplyTraces, knowledge: KnowledgeBase, messages: MessageLog) -> None:
        self._traces = traces
        self._knowledge = knowledge
        self._messages = messages

    def recent(self, scope: Scope, *, limit: int = 20) -> list[Explained]:
        """The scope's latest replies, newest first, each explained."""
        return [self._explained(scope, trace) for trace in self._traces.recent(scope, limit=limit)]

    def _explained(self, scope: Scope, trace: ReplyTrace) -> Explained:
        by_id = {record.id: record for record in self._knowledge.get(scope, trace.memory_ids)}
        memories = [by_id[memory_id] for memory_id in dict.fromkeys(trace.memory_ids) if memory_id in by_id]
        message_ids = [*trace.message_ids, *(found for call in trace.recalls for found in call["message_ids"])]
        messages = self._messages.messages_by_id(scope, message_ids)
        named = len(set(trace.memory_ids)) + len(set(message_ids))
        exchange = self._messages.messages_by_id(scope, [trace.message_id, trace.reply_id])
        return Explained(trace, memories, messages, named - len(memories) - len(messages), exchange)

    def in_words(self, scope: Scope, zone: tzinfo) -> str:
        """`/why`: what the companion had in mind for its last reply to this user, in plain words."""
        found = self.recent(scope, limit=1)
        if not found:
            return NO_TRACE
        last = found[0]
        lines = [f"For my last reply to you ({_local(last.trace.at, zone)}), I had in mind:"]
        if last.memories:
            lines.append("What I remember about you:")
            lines += [f"• {record.content}" for record in last.memories]
        if last.messages:
            lines.append("Things you said before:")
            lines += [f"• {_local(said.sent_at, zone)}, {said.speaker_name}: {said.content}" for said in last.messages]
        if not last.memories and not last.messages:
            lines.append("Nothing I remember about you beyond our conversation itself.")
        if last.trace.window_messages:
            lines.append(f"And the last {last.trace.window_messages} messages of our conversation.")
        if last.gone:
            lines.append(f"({last.gone} of the things I had in mind have been forgotten since.)")
        return "\n".join(lines)


def _local(moment: datetime, zone: tzinfo) -> str:
    return f"{moment.astimezone(zone):%Y-%m-%d %H:%M}"
