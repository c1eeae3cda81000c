"""The composition root and every surface: platforms, the command line.

- `app.py`: builds the app part by part from the settings (`config.py`, grouped by part) and closes it in one
  place; `startup.py`: start-up failures as one line.
- `platforms/`: Telegram, Discord and the terminal; `cli/`: the `companion` command line; `console/`: the
  operator's web console.
- `routing.py`: which persona speaks where; `ordering.py`: turns in order; `log_redaction.py`: no user text in logs.

Modules are imported by their own path (`from bot.app import build_app`); this file re-exports nothing.
"""
