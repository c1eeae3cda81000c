"""Lorebook activation: keys in the recent messages, constant entries, selective keys, the token budget."""

from __future__ import annotations

from typing import Any

from core.llm.client import count_tokens
from core.reply.lore import active_lore
from personas.lorebook import Lorebook


def book(*entries: dict[str, Any], **settings: Any) -> Lorebook:
    return Lorebook.model_validate({"entries": list(entries), **settings})


def contents(lorebook: Lorebook, *recent: str, budget: int = 1000) -> list[str]:
    return [entry.content for entry in active_lore(lorebook, list(recent), budget=budget)]


def test_keys_fire_case_insensitively_within_the_scan_depth() -> None:
    lore = book({"keys": ["Lighthouse", "灯塔"], "content": "dark lighthouse"}, scan_depth=2)
    assert contents(lore, "what about the LIGHTHOUSE?") == ["dark lighthouse"]
    assert contents(lore, "我看到了灯塔") == ["dark lighthouse"]
    assert contents(lore, "the lighthouse", "hello", "how are you") == []  # three messages back: out of depth
    assert contents(lore, "lighthouses everywhere") == []  # whole words at Latin edges


def test_constant_entries_always_fire_and_disabled_ones_never() -> None:
    lore = book(
        {"keys": [], "content": "always", "constant": True},
        {"keys": ["sea"], "content": "off", "enabled": False},
        {"keys": ["sea"], "content": "on"},
    )
    assert contents(lore, "the sea") == ["always", "on"]
    assert contents(lore, "nothing here") == ["always"]


def test_selective_entries_need_a_secondary_key_too() -> None:
    lore = book({"keys": ["ship"], "secondary_keys": ["storm", "wreck"], "selective": True, "content": "the wreck"})
    assert contents(lore, "the ship sailed") == []
    assert contents(lore, "the ship in the storm") == ["the wreck"]


def test_case_sensitive_and_regex_keys() -> None:
    lore = book(
        {"keys": ["May"], "case_sensitive": True, "content": "a person called May"},
        {"keys": [r"\bboat(s)?\b"], "use_regex": True, "content": "boats"},
        {"keys": ["/SAIL(ING)?/i"], "use_regex": True, "case_sensitive": True, "content": "sailing"},
        {"keys": ["(unclosed"], "use_regex": True, "content": "never"},
    )
    assert contents(lore, "I saw May and two boats") == ["a person called May", "boats"]
    assert contents(lore, "in may we go sailing") == ["sailing"]


def test_chosen_entries_are_placed_by_insertion_order() -> None:
    lore = book(
        {"keys": ["a"], "content": "third", "insertion_order": 30},
        {"keys": ["a"], "content": "first", "insertion_order": 10},
        {"keys": ["a"], "content": "second", "insertion_order": 20},
    )
    assert contents(lore, "a") == ["first", "second", "third"]


def test_over_budget_the_lowest_priority_goes_first_and_constants_stay() -> None:
    words = "word " * 40
    lore = book(
        {"keys": ["x"], "content": "low " + words, "insertion_order": 1},
        {"keys": ["x"], "content": "high " + words, "insertion_order": 50},
        {"keys": [], "content": "rule " + words, "constant": True, "insertion_order": 99},
        {"keys": ["x"], "content": "top " + words, "priority": 100, "insertion_order": 2},
    )
    one = count_tokens("low " + words) + 1
    assert [text.split()[0] for text in contents(lore, "x", budget=3 * one)] == ["top", "high", "rule"]
    assert [text.split()[0] for text in contents(lore, "x", budget=one)] == ["rule"]
    # the book's own budget applies too
    assert contents(book(*lore.entries, token_budget=one), "x", budget=10_000)[0].startswith("rule")


def test_macros_are_filled_before_tokens_are_counted() -> None:
    lore = book({"keys": ["harbor"], "content": "{{char}} works at the harbor."})
    [entry] = active_lore(lore, ["the harbor"], budget=100, fill=lambda text: text.replace("{{char}}", "Marin"))
    assert entry.content == "Marin works at the harbor."
