"""Persona files, their loader and Character Card import."""

from .card import CardError, persona_from_card, read_card
from .loader import (
    DEFAULT_PERSONA_ID,
    PERSONA_DIR,
    ModelChoice,
    Persona,
    PersonaError,
    PersonaRegistry,
    load_persona,
    persona_yaml,
)
from .lorebook import LoreEntry, Lorebook

__all__ = [
    "DEFAULT_PERSONA_ID",
    "PERSONA_DIR",
    "CardError",
    "LoreEntry",
    "Lorebook",
    "ModelChoice",
    "Persona",
    "PersonaError",
    "PersonaRegistry",
    "load_persona",
    "persona_from_card",
    "persona_yaml",
    "read_card",
]
