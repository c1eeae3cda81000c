"""Discord: `adapter.py` (the discord.py bot, its cog of slash commands and listeners), `reply.py`
(how it answers in a channel, and where a growing reply appears), `views.py` (pages and forget buttons),
`places.py` (who and where, as the companion names them)."""
