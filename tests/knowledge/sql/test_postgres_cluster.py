"""Turn locks on PostgreSQL: a turn holds a connection while it runs, so a process answers at most as many
conversations at once as it may hold connections (`COMPANION_DATABASE_TURN_CONNECTIONS`); the rest wait."""

from __future__ import annotations

import asyncio

from knowledge.sql.postgres import PostgresCluster


async def test_turns_past_the_connections_wait_for_one_to_end(database_url: str) -> None:
    cluster = PostgresCluster(database_url, pool_size=1)
    order: list[str] = []

    async def turn(name: str, seconds: float) -> None:
        async with cluster.acquire(f"turn:{name}"):
            order.append(f"{name} starts")
            await asyncio.sleep(seconds)
            order.append(f"{name} ends")

    try:
        first = asyncio.create_task(turn("alice", 0.3))
        await asyncio.sleep(0.1)  # alice's turn holds the only connection
        await asyncio.gather(first, turn("bob", 0))  # another conversation: no lock in common, yet it waits
    finally:
        await cluster.aclose()
    assert order == ["alice starts", "alice ends", "bob starts", "bob ends"]
