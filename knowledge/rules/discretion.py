"""Discretion: what a user said in one place is used in another only if they allowed it.

The rule: docs/development/design-rules.md#discretion.

Every memory records where it was learned (`MemoryRecord.learned_in`: a group conversation's id, or
None for a private chat), and every message the conversation it was said in. An `Audience` says who
will read what the companion recalls for a reply: in a private chat the user alone, who may be
reminded of anything; in a group everyone there, so only what was learned in that group, what the
user marked as shared, or everything if they switched sharing on. Memories stored before origins
existed read as learned in private: the safe default.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from knowledge.records import MemoryRecord, StoredMessage

PRIVATE_ORIGIN = "private"
GROUP_ORIGIN = "group"
SHARED_MARK = "shared"


@dataclass(frozen=True, slots=True)
class Audience:
    """Who reads a reply: the user alone (`group_id` None) or the members of one group chat."""

    group_id: str | None = None  # the group conversation's id; None: a private chat
    shares_everything: bool = False  # the user allowed all they said anywhere to be used in groups

    @classmethod
    def of(cls, conversation_id: str, *, group: bool, shares_everything: bool = False) -> Audience:
        """Who reads a reply in this conversation: the user alone in private, everyone there in a group."""
        return cls(learned_in(conversation_id, group=group), shares_everything)

    @property
    def sees_everything(self) -> bool:
        """Whether nothing of the scope has to be held back."""
        return self.group_id is None or self.shares_everything

    def may_use(self, record: MemoryRecord) -> bool:
        """Whether a memory may reach this audience's prompt."""
        return self.sees_everything or record.shared or record.learned_in == self.group_id

    def may_use_derived(self, written_from: Collection[str], sources: Iterable[MemoryRecord]) -> bool:
        """Whether a text written from the memories `written_from` (the profile) may reach this audience, given
        those of them still stored (`sources`): in a group only if every one of them may, and one written
        from none (by hand) only where nothing has to be held back."""
        if self.sees_everything:
            return True
        usable = {record.id for record in sources if self.may_use(record)}
        return bool(written_from) and set(written_from) <= usable

    def may_hear_of(self, places: Iterable[str | None]) -> bool:
        """Whether something learned in these places (None: a private chat; else a group) may reach this
        audience: in a group only what was learned there alone (an ongoing thread)."""
        return self.sees_everything or all(place == self.group_id for place in places)

    def may_quote_from(self, conversation_id: str) -> bool:
        """Whether past messages said in `conversation_id` may be quoted to this audience."""
        return self.sees_everything or conversation_id == self.group_id

    def may_quote(self, message: StoredMessage) -> bool:
        """Whether a past message may be quoted to this audience."""
        return self.may_quote_from(message.conversation_id)


PRIVATE = Audience()


def learned_in(conversation_id: str, *, group: bool) -> str | None:
    """The origin a memory learned in this conversation records: the group's id, or None in private."""
    return conversation_id if group else None


def describe_origin(record: MemoryRecord) -> str:
    """Where a memory was learned and whether it is shared: "private", "group telegram:chat:-1001, shared"."""
    origin = PRIVATE_ORIGIN if record.learned_in is None else f"{GROUP_ORIGIN} {record.learned_in}"
    return f"{origin}, {SHARED_MARK}" if record.shared else origin


def parse_origin(text: str) -> tuple[str | None, bool]:
    """(learned_in, shared) from what `describe_origin` wrote; a ValueError says what is wrong."""
    origin, _, mark = (part.strip() for part in text.partition(","))
    if mark not in ("", SHARED_MARK):
        raise ValueError(f"{mark!r} after the origin: only {SHARED_MARK!r} may follow it")
    shared = mark == SHARED_MARK
    if origin == PRIVATE_ORIGIN:
        return None, shared
    kind, _, place = origin.partition(" ")
    if kind != GROUP_ORIGIN or not place.strip() or " " in place.strip():
        raise ValueError(f"origin {origin!r} is neither {PRIVATE_ORIGIN!r} nor '{GROUP_ORIGIN} <conversation id>'")
    return place.strip(), shared
