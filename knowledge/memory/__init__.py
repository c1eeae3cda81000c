"""Memories: the store and what works on it as a whole.

- `store.py`: the `KnowledgeBase` protocol; `chroma_store.py`: chromadb behind it, embedded or a server;
  `chroma_gathering.py`: writes of different jobs made in one chromadb call.
- `scope_ids.py`: each scope's memory ids in SQL, so a whole scope is read by id rather than by a scan.
- `store_guard.py`: a missing store is noticed; `chroma_erasure.py`: deleted vectors leave the disk.
- `decay_pass.py`: the decay pass over every scope; `memory_file.py`: MEMORY.md and JSON export and import.
- `lookup.py`: what commands and `/forget <what>` find in one scope.
"""
