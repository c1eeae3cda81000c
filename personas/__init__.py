"""Persona files, their loader, the lorebook model and Character Card import.

Modules are imported by their own path (`from personas.loader import Persona`); this file re-exports nothing.
"""
