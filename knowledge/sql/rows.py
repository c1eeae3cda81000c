"""`Row`: what the `Database` seam returns on either backend, a tuple of a statement's columns read by name.

A store maps a row into its record by column name (`row["sent_at"]`, or `Record(**row)` where the columns
are the record's fields), so a column added to a statement or moved in it never shifts another into the
wrong field. A row is still a tuple: a statement of one or two
columns unpacks as one (`[(count,)] = db.query("SELECT COUNT(*) …")`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, ClassVar, SupportsIndex, overload


class Row(tuple[Any, ...]):
    """One result row: its values in the statement's order, each also read by column name."""

    __slots__ = ()
    _index: ClassVar[dict[str, int]] = {}

    @overload
    def __getitem__(self, key: SupportsIndex | str) -> Any: ...

    @overload
    def __getitem__(self, key: slice) -> tuple[Any, ...]: ...

    def __getitem__(self, key: SupportsIndex | str | slice) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        """The column names, in order: `{**row}` is the row as a dict (as with `sqlite3.Row`)."""
        return list(self._index)


@lru_cache(maxsize=512)
def row_type(columns: tuple[str, ...]) -> type[Row]:
    """The row class of statements with these columns, made once."""
    index = {name: position for position, name in enumerate(columns)}
    return type("Row", (Row,), {"__slots__": (), "_index": index})
