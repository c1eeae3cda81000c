"""Telegram: `adapter.py` (the PTB `Application` and its handlers), `reply.py` (how it answers in a chat, and where
a growing reply appears), `places.py` (who and where, as the companion names them), `flood_control.py` (Telegram's
limits), `update_processor.py` (each chat's updates in order, chats at once), `aiohttp_request.py` (the bot's calls
to the Bot API)."""
