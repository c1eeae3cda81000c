-- Check-ins: each user's consent (/checkins on|off; NULL: the operator's default), where check-ins go
-- and what became of each (knowledge/journal/checkin_log.py).
-- depends: 0002.time-zone

ALTER TABLE user_settings ADD COLUMN checkins INTEGER;

CREATE TABLE checkin_contacts (
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    last_user_at TEXT NOT NULL,
    unanswered INTEGER NOT NULL DEFAULT 0,
    off_reason TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (persona_id, user_id)
);
CREATE INDEX checkin_contacts_by_last ON checkin_contacts (last_user_at);

CREATE TABLE checkins (
    id TEXT PRIMARY KEY,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    rule TEXT NOT NULL,
    memory_id TEXT,
    occasion TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    due_at TEXT NOT NULL,
    stale_at TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'planned'
        CHECK (state IN ('planned', 'writing', 'sending', 'sent', 'dropped', 'cancelled', 'failed')),
    job_id TEXT,
    planned_at TEXT NOT NULL,
    done_at TEXT,
    message_id TEXT,
    note TEXT NOT NULL DEFAULT ''
);
CREATE INDEX checkins_due ON checkins (state, due_at);
CREATE INDEX checkins_by_scope ON checkins (persona_id, user_id, state);
