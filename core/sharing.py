"""`/share`: the user's say over what the companion may bring up in group chats.

The rule: docs/development/design-rules.md#discretion.

By default a group hears only what was said in it. A user can share one memory (`/share <id>`, and
take it back with `/share <id> off`) or everything (`/share on|off`). The per-memory flag is an edit
of the memory, so it goes to the memory's history like any other.
"""

from __future__ import annotations

from core import phrasebook
from core.memory_editor import MemoryEditor
from knowledge.journal.user_settings import UserSettings
from knowledge.memory.store import KnowledgeBase
from knowledge.records import MemoryChange, Scope

_SWITCH = {"on": True, "yes": True, "off": False, "no": False}


class Sharing:
    """Answers `/share` requests of one scope at a time (sync: run it in a worker thread)."""

    def __init__(self, knowledge: KnowledgeBase, settings: UserSettings, editor: MemoryEditor) -> None:
        self._knowledge = knowledge
        self._settings = settings
        self._editor = editor

    def answer(self, scope: Scope, request: str) -> str:
        """Carry out `/share <request>` for `scope`; returns what to tell the user."""
        words = request.split()
        if not words:
            return phrasebook.sharing_status(self._settings.shares_in_groups(scope))
        if len(words) == 1 and words[0].lower() in _SWITCH:
            on = _SWITCH[words[0].lower()]
            self._settings.set_shares_in_groups(scope, on)
            return phrasebook.sharing_switched(on)
        if len(words) > 2 or (len(words) == 2 and words[1].lower() not in _SWITCH):
            return phrasebook.SHARE_USAGE
        return self._share_memory(scope, words[0], _SWITCH[words[1].lower()] if len(words) == 2 else True)

    def _share_memory(self, scope: Scope, memory_id: str, shared: bool) -> str:
        found = self._knowledge.get(scope, [memory_id])
        if not found:
            return phrasebook.no_such_memory(memory_id)
        if found[0].shared != shared:
            self._editor.edit(found[0], MemoryChange(shared=shared), actor="user")
        return phrasebook.memory_sharing(found[0], shared)
