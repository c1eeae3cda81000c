"""Storage, search and the pure rules. Imports nothing from core/ or bot/.

- `records.py`: the values every wing shares (`Scope`, `MemoryRecord`, `MemoryChange`, `StoredMessage`); `errors.py`:
  storage errors.
- `memory/`: the memory store; `conversations/`: messages and working memory; `journal/`: what the background keeps.
- `search/`: the hybrid search engine; `rules/`: decay, time, ranking, discretion, check-ins as pure functions.
- `dates/`: time named in words; `forget/`: what forgetting needs of storage; `sql/`: SQLite and PostgreSQL.
- `people/`: which platform identities are one person (`/link`), and joining their memories into one.
- `migration.py`: `companion migrate`'s copy from an embedded store into server mode.

Modules are imported by their own path (`from knowledge.memory.chroma_store import ChromaKnowledgeBase`);
this file re-exports nothing.
"""
