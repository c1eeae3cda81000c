"""Conversations: `message_log.py` (every message as it arrives), `working_memory.py` (the window a prompt
uses), `history.py` (past conversations, searchable) and `thread_index.py` (what a message's place in its
conversation adds to finding it: its neighbours, the question it answers, who said it, its sitting, how much
it says); `spool.py` (messages held through a database outage at a stop, stored at the next start)."""
