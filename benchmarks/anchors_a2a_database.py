"""a2a-sdk 1.3.0's DatabaseTaskStore (an anchor in docs/integrations/mcp.md) on an SQLite file, measured.

Its dependencies (sqlalchemy, aiosqlite) are not in berth's test extra, so this runs in a scratch venv:

    python3.11 -m venv /tmp/a2adb && /tmp/a2adb/bin/pip install "a2a-sdk[sqlite]==1.3.0"
    /tmp/a2adb/bin/python benchmarks/anchors_a2a_database.py

On a temporary SQLite file (deleted at the end), printed:
- a concurrent update: two workers, each with a store of its own on the file (two server processes),
  read one task, append a different message and save at once: which messages the task keeps, and
  whether either save was refused;
- at rest: whether the file's bytes hold the text of a message the task carries (a marker string);
- a restart and a deadline: an `input-required` task read back by a new engine and store (a new
  process), its state unchanged; the parameters `save` takes (no TTL or deadline among them).
The InMemoryTaskStore's figures are tests in tests/test_mcp_anchors.py.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import tempfile
from pathlib import Path
from typing import Any

MARKER = "berth-anchor-marker-c41e"


def _open(url: str) -> Any:
    engine = importlib.import_module("sqlalchemy.ext.asyncio").create_async_engine(url)
    return importlib.import_module("a2a.server.tasks").DatabaseTaskStore(engine)


async def main() -> None:
    pb: Any = importlib.import_module("a2a.types.a2a_pb2")
    ctx: Any = importlib.import_module("a2a.server.context").ServerCallContext()

    def note(text: str) -> Any:
        return pb.Message(message_id=text, role=pb.Role.ROLE_USER, parts=[pb.Part(text=text)])

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tasks.db"
        url = f"sqlite+aiosqlite:///{path}"
        first, second = _open(url), _open(url)
        task = pb.Task(id="t-1", context_id="c-1", status=pb.TaskStatus(state=pb.TaskState.TASK_STATE_WORKING))
        await first.save(task, ctx)
        a, b = await asyncio.gather(first.get("t-1", ctx), second.get("t-1", ctx))
        a.history.append(note("from worker A"))
        b.history.append(note("from worker B"))
        outcome = await asyncio.gather(first.save(a, ctx), second.save(b, ctx), return_exceptions=True)
        kept = [p.text for m in (await first.get("t-1", ctx)).history for p in m.parts]
        refused = [o for o in outcome if isinstance(o, BaseException)]
        print(f"concurrent update: kept {kept}, saves refused: {len(refused)}")

        waiting = pb.Task(
            id="t-2", context_id="c-1", status=pb.TaskStatus(state=pb.TaskState.TASK_STATE_INPUT_REQUIRED)
        )
        waiting.history.append(note(f"deploy prod with token {MARKER}"))
        await first.save(waiting, ctx)
        for store in (first, second):
            await store.engine.dispose()
        raw = b"".join(p.read_bytes() for p in Path(tmp).iterdir())
        print(f"at rest: message text in the SQLite file's bytes: {MARKER.encode() in raw}")

        restarted = _open(url)
        back = await restarted.get("t-2", ctx)
        print(f"restart: input-required task read by a new store: {back == waiting}")
        print(f"save's parameters: {list(inspect.signature(restarted.save).parameters)}")
        await restarted.engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())
