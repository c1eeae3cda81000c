"""Persona directories for tests that need more than the bundled persona."""

from __future__ import annotations

from pathlib import Path

import yaml

from personas.loader import PERSONA_DIR


def personas_with_a_tutor(directory: Path) -> Path:
    """`directory` holding the bundled 小祥 and a second persona, `tutor` ("Professor Owl")."""
    directory.mkdir(parents=True, exist_ok=True)
    original = PERSONA_DIR / "xiaoxiang.yaml"
    (directory / "xiaoxiang.yaml").write_text(original.read_text(encoding="utf-8"), encoding="utf-8")
    tutor = yaml.safe_load(original.read_text(encoding="utf-8"))
    tutor.update(id="tutor", name="Professor Owl")
    (directory / "tutor.yaml").write_text(yaml.safe_dump(tutor, allow_unicode=True), encoding="utf-8")
    return directory
