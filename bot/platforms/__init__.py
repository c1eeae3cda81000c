"""Where people talk to the companion: Telegram, Discord and the terminal.

- `telegram/`: the python-telegram-bot `Application`, its reply surfaces, flood limits and per-chat order.
- `discord/`: the discord.py bot and its cog.
- `terminal.py`: `companion chat`.
- `streaming.py`: replies that grow while the model writes; `render.py`: splitting and escaping for a platform.
"""
