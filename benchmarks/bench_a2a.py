"""berth.a2a.BerthTaskStore against a2a-sdk's InMemoryTaskStore: updates kept under a race, save+get rate.

    .venv/bin/python benchmarks/bench_a2a.py

The race: 8 workers append one message each to one task, 1,000 appends in all; each worker gets the task,
yields once to the event loop (the await a request handler has between its read and its write), appends
and saves, and on berth's `ConcurrentTaskModificationError` reads again and retries. Printed: the
messages the task holds at the end (every one of 1,000 kept, or how many were lost silently) and the
save+get pairs per second of one task each, in one process. The race on SQLite, PostgreSQL and Redis,
each worker with a store of its own, is `scripts/reliability.py --only a2a`.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from a2a.server.tasks import InMemoryTaskStore  # noqa: E402
from a2a.server.tasks.task_store import TaskStore  # noqa: E402
from tests.test_a2a import ctx, note, task  # noqa: E402

import berth  # noqa: E402
import berth.aio  # noqa: E402
from berth.a2a import BerthTaskStore, ConcurrentTaskModificationError  # noqa: E402


async def race(store: TaskStore, updates: int = 1000, workers: int = 8) -> int:
    await store.save(task("t-1"), ctx())
    queue = iter(range(updates))

    async def worker() -> None:
        for i in queue:
            while True:
                c = ctx()
                current: Any = await store.get("t-1", c)
                await asyncio.sleep(0)
                current.history.append(note(f"update-{i}"))
                try:
                    await store.save(current, c)
                    break
                except ConcurrentTaskModificationError:
                    continue

    await asyncio.gather(*(worker() for _ in range(workers)))
    final: Any = await store.get("t-1", ctx())
    return len(final.history)


async def rate(store: TaskStore, n: int = 2000) -> float:
    started = time.perf_counter()
    for i in range(n):
        c = ctx()
        await store.save(task(f"x-{i}"), c)
        await store.get(f"x-{i}", c)
    return n / (time.perf_counter() - started)


async def main() -> None:
    print(f"InMemoryTaskStore: {await race(InMemoryTaskStore())} of 1000 updates kept")
    print(f"InMemoryTaskStore: {await rate(InMemoryTaskStore()):,.0f} save+get pairs/s")
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    with tempfile.TemporaryDirectory() as tmp:
        for url in (f"memory://bench-{uuid.uuid4().hex}", f"sqlite:///{tmp}/berth.db"):
            async with berth.aio.open_store(url, identity="bench", sealer=sealer) as astore:
                store = BerthTaskStore(astore)
                scheme = url.split(":", 1)[0]
                if scheme == "memory":  # the race on the other backends: scripts/reliability.py --only a2a
                    print(f"BerthTaskStore ({scheme}, AES-GCM): {await race(store)} of 1000 updates kept")
                print(f"BerthTaskStore ({scheme}, AES-GCM): {await rate(store):,.0f} save+get pairs/s")


if __name__ == "__main__":
    asyncio.run(main())
