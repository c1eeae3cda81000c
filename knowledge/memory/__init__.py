"""Memories: the store and what works on it as a whole.

`store.py` (the `KnowledgeBase` protocol and chromadb behind it), `store_guard.py` (a missing store is noticed),
`chroma_erasure.py` (deleted vectors leave the disk), `decay_pass.py` (the decay pass over every scope),
`memory_file.py` (MEMORY.md and JSON export/import), `lookup.py` (what commands and `/forget <what>` find).
"""
