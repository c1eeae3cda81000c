"""Proof that something is forgotten: where a text still is under the data directory, byte by byte and row by row.

Two looks, because each can miss what the other sees: the raw bytes of every file (free pages,
write-ahead logs, vector files, exports, anything the companion or a library wrote), and the live
rows of every SQLite database (a text stored compressed or split over pages would not show as bytes).
The text is looked for as UTF-8 and, where it differs, as JSON writes it with ASCII escapes.
Databases are opened read-only; nothing under the directory is changed.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass
class ScanReport:
    """Every file scanned, and where the text was found: files by byte count, tables by row count."""

    scanned: list[Path] = field(default_factory=list)
    in_files: dict[Path, int] = field(default_factory=dict)
    in_rows: dict[str, int] = field(default_factory=dict)  # "<file>: <table>.<column>" -> rows
    unreadable: list[str] = field(default_factory=list)  # tables that could not be read (their bytes still were)

    @property
    def clean(self) -> bool:
        return not self.in_files and not self.in_rows


def _forms(text: str) -> set[bytes]:
    return {text.encode("utf-8"), json.dumps(text)[1:-1].encode("ascii")}


def scan_directory(directory: Path, text: str) -> ScanReport:
    """Where `text` still is under `directory` (every file, every live SQLite row)."""
    report = ScanReport()
    forms = _forms(text)
    for path in sorted(directory.rglob("*")):
        if not path.is_file():
            continue
        report.scanned.append(path)
        data = path.read_bytes()
        hits = sum(data.count(form) for form in forms)
        if hits:
            report.in_files[path] = hits
        if data.startswith(SQLITE_MAGIC):
            _scan_rows(path, text, f"{path.relative_to(directory)}: ", report)
    return report


def _scan_rows(database: Path, text: str, label: str, report: ScanReport) -> None:
    connection = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            try:
                for column in [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')]:
                    [(rows,)] = connection.execute(
                        f'SELECT COUNT(*) FROM "{table}" WHERE instr(CAST("{column}" AS TEXT), ?) > 0', (text,)
                    )
                    if rows:
                        report.in_rows[f"{label}{table}.{column}"] = rows
            except sqlite3.DatabaseError as error:  # e.g. a virtual table whose module this build lacks
                report.unreadable.append(f"{label}{table} ({error})")
    finally:
        connection.close()
