-- /forget <what> questions waiting for their answer, which may reach another process
-- (knowledge/forget/requests.py).
-- depends: 0003.checkins

CREATE TABLE forget_requests (
    key TEXT PRIMARY KEY,
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    what TEXT NOT NULL,
    asked_at TEXT NOT NULL
);
