"""The memory store, retrieval and working memory. Imports nothing from core/ or bot/."""

from .embedding import Embedder, load_embedder
from .message_log import StoredMessage
from .records import CATEGORIES, Category, MemoryRecord, Scope, ScoredMemory, Source
from .store import ChromaKnowledgeBase, KnowledgeBase, open_chroma_client
from .working_memory import WorkingMemory

__all__ = [
    "CATEGORIES",
    "Category",
    "ChromaKnowledgeBase",
    "Embedder",
    "KnowledgeBase",
    "MemoryRecord",
    "Scope",
    "ScoredMemory",
    "Source",
    "StoredMessage",
    "WorkingMemory",
    "load_embedder",
    "open_chroma_client",
]
