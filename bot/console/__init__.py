"""The operator console: a web page and a JSON API over what the companion remembers.

- `server.py`: the routes (pages and `/api`), served by uvicorn inside `companion web` and `companion run`.
- `access.py`: the operator token, browser sessions with their CSRF tokens, and the brake on failed logins.
- `views.py`: what the pages and the API show and change, through the services the command line uses.
- `templates/`: the server-rendered pages (Jinja2, every value escaped).
"""
