"""The `companion` command line: nouns and verbs, and the rule that one process owns a data directory.

- `main.py`: the `companion` group, `chat`, `run` and `web` (the console, `bot/console/`); `support.py`: what
  every command shares.
- `memory.py` (with `profile.py`: `companion memory profile …`), `persona.py`, `checkins.py`, `users.py`,
  `migrate.py`: the `companion <noun> <verb>` groups.
- `doctor.py`: `companion doctor`, one line per check of the installation and settings.
- `ownership.py`: which process carries out a command; `data_dir_lock.py`: the lock that makes one owner;
  `control_socket.py`: how a command beside a running bot reaches it.
"""
