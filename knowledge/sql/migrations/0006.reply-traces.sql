-- Reply traces: ids, counts, model, tokens and timings of each answered turn, never text
-- (knowledge/journal/reply_traces.py).
-- depends: 0004.forget-requests

CREATE TABLE reply_traces (
    reply_id TEXT PRIMARY KEY,
    message_id TEXT NOT NULL,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    at TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    first_ms INTEGER NOT NULL,
    total_ms INTEGER NOT NULL,
    window_messages INTEGER NOT NULL,
    memory_ids TEXT NOT NULL,
    message_ids TEXT NOT NULL,
    recalls TEXT NOT NULL
);
CREATE INDEX reply_traces_by_scope ON reply_traces (persona_id, user_id, at);
CREATE INDEX reply_traces_by_time ON reply_traces (at);
