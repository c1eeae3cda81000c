"""Scheduled passes: a slot claimed once across processes, and the last slot a pass was claimed for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from knowledge.sql.scheduled_passes import ScheduledPasses
from tests.conftest import Backend

NIGHT = datetime(2027, 1, 4, 3, tzinfo=UTC)


def test_a_slot_is_claimed_once_and_the_last_claimed_is_read_back_by_any_process(backend: Backend) -> None:
    one, other = ScheduledPasses(backend.open()), ScheduledPasses(backend.open())
    assert one.last("consolidation:abc") is None
    assert one.claim("consolidation:abc", NIGHT)
    assert not other.claim("consolidation:abc", NIGHT)  # another process, the same night
    assert other.last("consolidation:abc") == NIGHT
    assert not other.claim("consolidation:abc", NIGHT - timedelta(days=1))  # never back in time
    assert other.claim("consolidation:abc", NIGHT + timedelta(days=1))
    assert one.last("consolidation:abc") == NIGHT + timedelta(days=1) and one.last("consolidation:xyz") is None
