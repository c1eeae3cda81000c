"""People: one person behind several platform identities (`/link`).

`links.py` keeps which identity ("telegram:7", "discord:99", "cli:alice") belongs to which person, and the
one-time codes that prove a person holds two identities; `joining.py` moves what one identity's (or
person's) memory holds into the person it joins, across every store, so that the two become one memory.
"""
