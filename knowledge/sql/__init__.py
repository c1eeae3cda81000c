"""The SQL storage seam and what processes sharing a store agree on.

- `database.py`: the `Database` seam; `sqlite.py` (embedded) and `postgres.py` (server mode, `migrations/`);
  `rows.py`: the rows both return, read by column name.
- `cluster.py`: locks, liveness and forget numbers; `scope_versions.py`: whose snapshot is stale;
  `scheduled_passes.py`: a pass runs once per slot however many processes fire it.
"""
