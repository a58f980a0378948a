"""SQLite's write gate (`herald.db.WriteGate`): one holder at a time, first come first served, across
the event loops of several threads (the worker embedded in `herald serve` runs on its own)."""

from __future__ import annotations

import asyncio
import threading

from herald.db import WriteGate


async def test_waiters_get_the_gate_in_arrival_order() -> None:
    gate = WriteGate()
    await gate.acquire()
    order: list[int] = []

    async def writer(number: int) -> None:
        await gate.acquire()
        order.append(number)
        gate.release()

    tasks = [asyncio.create_task(writer(number)) for number in range(3)]
    await asyncio.sleep(0)  # every writer is queued now
    gate.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]


async def test_a_cancelled_waiter_passes_the_gate_on() -> None:
    gate = WriteGate()
    await gate.acquire()
    cancelled = asyncio.create_task(gate.acquire())
    after = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    gate.release()  # handed to `cancelled`, which is cancelled before it runs
    cancelled.cancel()
    await after
    gate.release()
    await gate.acquire()  # free again
    gate.release()


async def test_a_waiter_cancelled_once_granted_passes_the_gate_on() -> None:
    gate = WriteGate()
    await gate.acquire()
    granted = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    gate.release()
    await asyncio.sleep(0)  # the gate is handed to `granted`, which has not run since
    granted.cancel()
    after = asyncio.create_task(gate.acquire())
    await asyncio.wait_for(after, timeout=10)
    assert granted.cancelled()
    gate.release()


async def test_holders_on_two_threads_never_overlap() -> None:
    gate = WriteGate()
    inside = 0
    overlaps = 0
    counted = threading.Lock()

    async def writers(count: int) -> None:
        nonlocal inside, overlaps
        for _ in range(count):
            await gate.acquire()
            with counted:
                inside += 1
                overlaps += inside > 1
            await asyncio.sleep(0)
            with counted:
                inside -= 1
            gate.release()

    other = threading.Thread(target=lambda: asyncio.run(writers(300)))
    other.start()
    await writers(300)
    await asyncio.to_thread(other.join)
    assert overlaps == 0
    await gate.acquire()  # nobody holds it at the end
    gate.release()
