-- Each user's profile, written by the background from their facts (knowledge/journal/profiles.py).
-- depends: 0004.forget-requests

CREATE TABLE profiles (
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    text TEXT NOT NULL DEFAULT '',
    memory_ids TEXT NOT NULL DEFAULT '[]',
    basis TEXT NOT NULL DEFAULT '',
    author TEXT NOT NULL DEFAULT '',
    written_at TEXT,
    changed_at TEXT,
    PRIMARY KEY (persona_id, user_id)
);
CREATE INDEX profiles_changed ON profiles (changed_at);
