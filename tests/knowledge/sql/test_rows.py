"""Rows read by column name on both backends, and still tuples of the statement's columns."""

from __future__ import annotations

from knowledge.sql.rows import Row, row_type
from tests.conftest import Backend


def test_a_row_reads_by_name_and_stays_a_tuple() -> None:
    row = row_type(("id", "sent_at"))(("msg_1", "2026-03-01"))
    assert (row["sent_at"], row[0], row[-1]) == ("2026-03-01", "msg_1", "2026-03-01")
    assert row == ("msg_1", "2026-03-01") and row[:1] == ("msg_1",)
    assert row_type(("id", "sent_at")) is type(row)  # one class per column list


def test_both_backends_return_rows_read_by_column_name(backend: Backend) -> None:
    db = backend.open()
    [row] = db.query("SELECT 2 AS n, 'a' AS id")
    assert isinstance(row, Row) and (row["id"], row["n"]) == ("a", 2) and row == (2, "a")
    with db.transaction() as transaction:
        [written] = transaction.execute("SELECT ? AS text", ("hello",)).fetchall()
    assert written["text"] == "hello"
