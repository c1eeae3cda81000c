"""Conversations: `message_log.py` (every message as it arrives), `working_memory.py` (the window a prompt
uses) and `history.py` (past conversations, searchable)."""
