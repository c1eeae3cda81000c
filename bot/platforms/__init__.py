"""Where people talk to the companion: Telegram, Discord and the terminal.

- `pipeline.py`: how a message becomes a reply, the same everywhere; `commands.py`: the one set of chat commands;
  `outage.py`: messages held while the database is out of reach, answered in order once it is back.
- `telegram/`: the python-telegram-bot `Application`, its reply surfaces, flood limits and per-chat order.
- `discord/`: the discord.py bot, its cog and its buttons.
- `terminal.py`: `companion chat`.
- `streaming.py`: replies that grow while the model writes; `render.py`: splitting and escaping for a platform.

Each platform says only how it receives, sends and edits, and builds the references of who and where once
(`telegram/places.py`, `discord/places.py`). It is given what it needs (`pipeline.PlatformContext`) and reaches
core/ through the `Companion` facade.
"""
