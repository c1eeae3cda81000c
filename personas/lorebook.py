"""A persona's lorebook (a Character Card `character_book`): entries inserted when their keys come up.

Field names are the card spec's, so an imported book round-trips. Unknown fields are kept as they
are: card editors add their own, and losing them on import would break the card for its next user.
Which entries fire, and how they fit the prompt, is decided in core/reply/lore.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class LoreEntry(BaseModel):
    """One piece of lore and the keys that bring it into the prompt."""

    model_config = ConfigDict(extra="allow", frozen=True)

    keys: list[str] = []
    content: str
    enabled: bool = True
    insertion_order: int = 100  # lower is placed higher in the prompt
    constant: bool = False  # always inserted (within the token budget)
    selective: bool = False  # also needs one of `secondary_keys`
    secondary_keys: list[str] = []
    case_sensitive: bool = False
    use_regex: bool = False  # keys are regular expressions (Character Card V3)
    priority: int | None = None  # when over budget the lowest goes first; default: insertion_order
    position: Literal["before_char", "after_char"] | None = None  # default: before the character
    name: str | None = None
    comment: str | None = None
    id: int | str | None = None
    extensions: dict[str, Any] = {}


class Lorebook(BaseModel):
    """Entries plus how far back to look for keys and how many tokens the inserted lore may take."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str | None = None
    description: str | None = None
    scan_depth: int = Field(default=2, ge=1, description="recent messages searched for keys")
    token_budget: int = Field(default=512, ge=1, description="tokens the inserted entries may take")
    recursive_scanning: bool = False  # not supported: entries never trigger each other
    extensions: dict[str, Any] = {}
    entries: list[LoreEntry] = []
