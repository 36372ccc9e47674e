"""LangGraph checkpoint savers whose checkpoints are sealed berth frames (extra `langgraph`).

    store = berth.open_store("sqlite:////var/lib/app/berth.db", identity="support-bot", sealer=sealer)
    graph = builder.compile(checkpointer=berth.langgraph.BerthSaver(store))
    ...
    astore = berth.aio.open_store(url, identity="support-bot", sealer=sealer)
    graph = builder.compile(checkpointer=berth.langgraph.AsyncBerthSaver(astore))

Every checkpoint and every task's pending writes is one berth frame, sealed by
the store's sealer and bound (as the seal's associated data) to the store's
identity and its key, which names the thread, the namespace and the checkpoint
id; the sealed body names them again, and a load checks both. So a planted
frame, a frame moved to another thread and a flipped byte are refused
(`berth.IntegrityError` or `berth.FormatError`), never decoded.

Keys, under `prefix` (default ``langgraph/``)::

    <thread>/<ns>/c/<checkpoint id>               the checkpoint and its metadata
    <thread>/<ns>/c/<checkpoint id>/<task id>     one task's pending writes

Each part is escaped into one key segment (`~XX` per UTF-8 byte outside
``A-Z a-z 0-9 - _ : @ + = ,``; the empty string is ``~``), and a part whose
escaped form passes 180 bytes is named by its SHA-256 (``~h<hex>``) -- never cut:
the full value rides in the sealed body and is compared on every load.
LangGraph's checkpoint ids are UUIDv6 strings, time-ordered and made of safe
characters, so key order is time order. A checkpoint's writes sort right after it,
so one newest-first ordered load of ``c/`` (`Store.load_prefix(..., limit=n, reverse=True)`)
meets each checkpoint's writes just before the checkpoint itself: the latest checkpoint
with its writes, or a page of history with theirs, is one bounded read of whole frames.

Interrupts resumed exactly once: `resume_once` / `aresume_once` (below).
"""

from __future__ import annotations

try:
    from berth.langgraph._saver import AsyncBerthSaver, BerthSaver, aresume_once, resume_once
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    if (exc.name or "").partition(".")[0] not in ("langgraph", "langchain_core"):
        raise
    raise ImportError("berth.langgraph needs langgraph: pip install 'berthing[langgraph]'") from exc

from berth._hitl import human_response, parse_approval
from berth.langgraph._frames import DEFAULT_DEADLINE, PROVIDER
from berth.langgraph._io import SaverIO

__all__ = [
    "DEFAULT_DEADLINE",
    "PROVIDER",
    "AsyncBerthSaver",
    "BerthSaver",
    "aresume_once",
    "human_response",
    "parse_approval",
    "resume_once",
]

_SyncIO = SaverIO  # under its first name, for berth's own tests (a fault planted in the sync saver's I/O)

for _obj in (AsyncBerthSaver, BerthSaver, aresume_once, resume_once):  # reprs name the public path, as before
    _obj.__module__ = __name__
