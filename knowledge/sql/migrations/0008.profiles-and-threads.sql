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

-- What is going on in each user's life now, opened, updated and closed by the monitor
-- (knowledge/journal/ongoing_threads.py).
CREATE TABLE ongoing_threads (
    id TEXT PRIMARY KEY,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    title TEXT NOT NULL,
    news TEXT NOT NULL DEFAULT '',
    since TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    closed_at TEXT,
    message_ids TEXT NOT NULL DEFAULT '[]',
    places TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX ongoing_threads_by_scope ON ongoing_threads (persona_id, user_id, closed_at);
