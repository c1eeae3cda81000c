-- One person across platforms: which identity belongs to which person, the one-time codes that link them,
-- wrong tries, and the row every link transaction takes first (knowledge/people/links.py).
-- depends: 0004.forget-requests

CREATE TABLE person_links (
    identity TEXT PRIMARY KEY,
    person_id TEXT NOT NULL,
    linked_at TEXT NOT NULL
);
CREATE INDEX person_links_by_person ON person_links (person_id);

CREATE TABLE link_codes (
    identity TEXT PRIMARY KEY,
    code_digest TEXT NOT NULL UNIQUE,
    expires_at TEXT NOT NULL
);

CREATE TABLE link_tries (
    identity TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE INDEX link_tries_by_identity ON link_tries (identity, at);

CREATE TABLE link_lock (
    id INTEGER PRIMARY KEY,
    turns INTEGER NOT NULL
);
INSERT INTO link_lock (id, turns) VALUES (1, 0);
