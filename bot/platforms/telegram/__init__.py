"""Telegram: `adapter.py` (the PTB `Application` and its handlers), `reply.py` (where a growing reply appears),
`flood_control.py` (Telegram's limits), `update_processor.py` (each chat's updates in order, chats at once)."""
