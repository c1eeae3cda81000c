"""TurnOrder: one turn at a time per key, in arrival order, nothing kept for idle keys."""

from __future__ import annotations

import asyncio

from bot.ordering import TurnOrder


async def test_turns_of_one_key_run_one_at_a_time_in_arrival_order_and_other_keys_run_alongside() -> None:
    order = TurnOrder()
    events: list[str] = []
    release = asyncio.Event()

    async def turn(key: str, name: str) -> None:
        async with order.turn(key):
            events.append(f"start {name}")
            await release.wait()
            events.append(f"end {name}")

    tasks = [asyncio.create_task(turn(key, name)) for key, name in [("a", "a1"), ("a", "a2"), ("b", "b1")]]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert events == ["start a1", "start b1"]  # a2 waits for a1; b1 does not wait for anyone
    assert len(order) == 2
    release.set()
    await asyncio.gather(*tasks)
    assert events.index("end a1") < events.index("start a2")
    assert len(order) == 0


async def test_a_failing_turn_frees_the_key() -> None:
    order = TurnOrder()
    try:
        async with order.turn("a"):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert len(order) == 0
    async with order.turn("a"):
        assert len(order) == 1
