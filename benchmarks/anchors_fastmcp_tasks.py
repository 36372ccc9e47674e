"""fastmcp-tasks 4.1.4 (the anchor in docs/integrations/mcp.md), measured on a real Redis, outside the suite.

fastmcp-tasks is not a dependency of berth and must not become one: run this in a scratch venv.

    python3.11 -m venv /tmp/fmt && /tmp/fmt/bin/pip install fastmcp-tasks==4.1.4
    /tmp/fmt/bin/python benchmarks/anchors_fastmcp_tasks.py [redis://127.0.0.1:6379/0]

It drives the package's own input store (`fastmcp_tasks.input_store`, the Redis state a task in
`input_required` keeps between legs) through a real `docket.Docket`, under a docket name of its own
(`berth-anchors-<random>`), and deletes every key under that name at the end. Measured and printed:
- the TTL Redis reports on the task's stored request state and outstanding requests (seconds);
- whether the stored values are plaintext: a marker string put in the tool's request state and in the
  question is searched for in the raw Redis values, with FASTMCP_TASKS_ENCRYPTION_KEY set (the package's
  Fernet key encrypts the task-context snapshot only, not this input state);
- the answer delivered twice, through the package's own update sequence (`tasks_update`: update lock,
  `translate_responses`, `store_input_responses`, `clear_outstanding`): how many times an answer is
  accepted, each acceptance being one next leg the handler would enqueue (one continuation run).
Not measured here: a full server with a Docket worker running the tool (the continuation's run count is
inferred from the accepted updates, one enqueue each, as `handlers.tasks_update` does).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
import uuid
from typing import Any

MARKER = "berth-anchor-marker-7f3a"


async def _deliver(store: Any, docket: Any, task_id: str, answer: dict[str, Any]) -> int:
    """One tasks/update, in handlers.tasks_update's order; 1 when it would enqueue the next leg (one tool run)."""
    assert await store.acquire_update_lock_blocking(docket, None, task_id)
    try:
        matched = await store.translate_responses(docket, None, task_id, 1, answer)
        if matched is None:
            return 0  # no outstanding key matched: the handler's idempotent no-op
        translated, _keys = matched
        await store.store_input_responses(docket, None, task_id, translated)
        await store.clear_outstanding(docket, None, task_id, 1)
        return 1
    finally:
        await store.release_update_lock(docket, None, task_id)


async def main(url: str) -> None:
    os.environ.setdefault("FASTMCP_TASKS_ENCRYPTION_KEY", "a-long-operator-key-for-the-snapshot")
    docket_mod: Any = importlib.import_module("docket")
    store: Any = importlib.import_module("fastmcp_tasks.input_store")
    name = f"berth-anchors-{uuid.uuid4().hex[:8]}"
    task_id = uuid.uuid4().hex
    question = {
        "method": "elicitation/create",
        "params": {"message": f"deploy prod? {MARKER}", "requestedSchema": {"type": "object", "properties": {}}},
    }
    async with docket_mod.Docket(name=name, url=url) as docket:
        try:
            await store.store_outstanding(docket, None, task_id, 1, {"ok": question}, f"state {MARKER}")
            async with docket.redis() as redis:
                keys = [k.decode() async for k in redis.scan_iter(match=f"{name}*")]
                ttls = {k.split(f"{task_id}:", 1)[1]: await redis.ttl(k) for k in keys}
                raw = b""
                for k in keys:
                    kind = (await redis.type(k)).decode()
                    if kind == "string":
                        raw += await redis.get(k) or b""
                    elif kind == "hash":
                        raw += b"".join(v for v in (await redis.hgetall(k)).values())
            print(f"keys written: {len(keys)}; TTL reported by Redis (s): {ttls}")
            print(f"marker in raw Redis values with FASTMCP_TASKS_ENCRYPTION_KEY set: {MARKER.encode() in raw}")

            for how in ("sequentially", "at once"):
                tid = f"{task_id}-{how[:3]}"
                await store.store_outstanding(docket, None, tid, 1, {"ok": question}, f"state {MARKER}")
                surfaced = list(await store.read_outstanding_inputs(docket, None, tid, 1))
                answer = {surfaced[0]: {"action": "accept", "content": {}}}
                if how == "sequentially":
                    runs = [await _deliver(store, docket, tid, answer), await _deliver(store, docket, tid, answer)]
                else:
                    runs = list(await asyncio.gather(*(_deliver(store, docket, tid, answer) for _ in range(2))))
                print(f"the same answer delivered twice, {how}: accepted {sum(runs)} time(s)")
        finally:
            async with docket.redis() as redis:
                leftover = [k async for k in redis.scan_iter(match=f"{name}*")]
                if leftover:
                    await redis.delete(*leftover)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379/0"))
