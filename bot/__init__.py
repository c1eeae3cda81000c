"""Platform adapters (Discord, Telegram, the terminal), the command line and the composition root (`app.py`).

Modules are imported by their own path (`from bot.app import build_app`); this file re-exports nothing.
"""
