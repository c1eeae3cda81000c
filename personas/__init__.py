"""Persona files and their loader."""

from .loader import DEFAULT_PERSONA_ID, PERSONA_DIR, Persona, PersonaError, PersonaRegistry, load_persona

__all__ = ["DEFAULT_PERSONA_ID", "PERSONA_DIR", "Persona", "PersonaError", "PersonaRegistry", "load_persona"]
