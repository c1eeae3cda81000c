"""Discord: `adapter.py` holds the discord.py bot, its cog of slash commands and listeners, and `setup(bot)`."""
