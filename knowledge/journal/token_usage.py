"""Token usage: the tokens each role's model calls spent, summed per day, role and model.

A call spared in code (the monitor's, for a turn of small talk) is counted too, under the model `SPARED`, with no
tokens: what the gate saves is seen beside what the calls cost."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from knowledge.sql.database import Database, iso

SPARED = "(spared)"  # the model of the calls a rule in code made unnecessary

SCHEMA = """
CREATE TABLE IF NOT EXISTS token_usage (
    day TEXT NOT NULL,
    role TEXT NOT NULL,
    model TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (day, role, model)
);
"""


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """What one role's calls to one model have spent."""

    role: str
    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int


class TokenUsageLog:
    """Daily totals of the tokens spent, over all scopes (a model call serves the process, not a user)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        db.create(SCHEMA)

    def record(self, role: str, model: str, prompt_tokens: int, completion_tokens: int, *, at: datetime) -> None:
        """Add one model call to the day's totals."""
        with self._db.transaction() as db:
            db.execute(
                "INSERT INTO token_usage (day, role, model, calls, prompt_tokens, completion_tokens)"
                " VALUES (?, ?, ?, 1, ?, ?) ON CONFLICT (day, role, model) DO UPDATE SET calls = token_usage.calls + 1,"
                " prompt_tokens = token_usage.prompt_tokens + excluded.prompt_tokens,"
                " completion_tokens = token_usage.completion_tokens + excluded.completion_tokens",
                (iso(at)[:10], role, model, prompt_tokens, completion_tokens),
            )

    def spared(self, role: str, *, at: datetime) -> None:
        """Count one call of `role` spared in code: the day's `SPARED` calls, with no tokens."""
        self.record(role, SPARED, 0, 0, at=at)

    def totals(self) -> list[TokenUsage]:
        """Tokens spent per role and model since the data directory was created."""
        rows = self._db.query(
            "SELECT role, model, SUM(calls) AS calls, SUM(prompt_tokens) AS prompt_tokens,"
            " SUM(completion_tokens) AS completion_tokens FROM token_usage GROUP BY role, model ORDER BY role, model"
        )
        return [
            TokenUsage(
                role=row["role"],
                model=row["model"],
                calls=int(row["calls"]),
                prompt_tokens=int(row["prompt_tokens"]),
                completion_tokens=int(row["completion_tokens"]),
            )
            for row in rows
        ]
