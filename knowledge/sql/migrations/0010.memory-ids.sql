-- The ids of each scope's memories, so a whole scope is read from the memory store by id
-- (knowledge/memory/scope_ids.py), and the store they were listed from.
-- depends: 0004.forget-requests

CREATE TABLE memory_ids (
    persona_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    listed_at TEXT NOT NULL,
    PRIMARY KEY (persona_id, user_id, memory_id)
);

CREATE TABLE memory_ids_store (
    store_id TEXT PRIMARY KEY,
    complete INTEGER NOT NULL DEFAULT 0
);
