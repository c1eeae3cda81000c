"""Storage, retrieval and decay: memories, messages, the journal. Imports nothing from core/ or bot/.

Modules are imported by their own path (`from knowledge.memory.store import ChromaKnowledgeBase`); this file re-exports
nothing.
"""
