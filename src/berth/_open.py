# generated from src/berth/_aio_open.py by scripts/twin.py — do not edit: change the source and run the script
"""`berth.open_store`: a store for a URL (generated from `berth._aio_open`: change that one)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from berth._core import DEFAULT_MAX_ENVELOPE_BYTES, store_sealer
from berth._public import publish
from berth._sealer import Sealer
from berth._store import Store
from berth.backends import Backend, open_backend

__all__ = ["open_store"]


def open_store(
    url: str,
    *,
    identity: str,
    sealer: Sealer | None = None,
    accept_plaintext: bool = False,
    max_envelope_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
    clock: Callable[[], datetime] | None = None,
    witness: str | Backend | None = None,
    **options: Any,
) -> Store:
    """Open a store by URL: memory://, file:///dir, sqlite:////abs/file.db, postgresql://, redis://, gs://, s3://.

    Args:
        url: where frames live; a scheme whose extra is not installed names the extra.
        identity: the namespace of one agent, tenant or service.
        sealer: None means `PlaintextSealer()`, with a warning once (development only).
        accept_plaintext: let a sealed store read legacy plaintext frames, to `reseal` them.
        max_envelope_bytes: refuse envelopes whose JSON (before sealing) is larger than this;
            the default, 65 MiB, takes a 64 MiB `provider_state` with 1 MiB for the rest.
        clock: returns "now" as an aware datetime (tests inject one).
        witness: a second backend URL (or a backend), ideally in another trust domain, where
            berth records the latest frame of each key and how it left; load and claim then
            refuse a frame that is not the latest, and `audit()` finds deleted, replayed and
            rolled-back frames (docs/store.md, "The witness"). Opened from its own URL, query options
            included (`?synchronous=NORMAL` on a SQLite witness), and `create`: `**options` are the store's.
        **options: passed to the backend (`berth.aio`'s open also takes `max_threads`: the worker
            threads of a backend whose client blocks); `create=False` (any scheme) opens only a store that
            exists, its witness too: where a backend would create its storage (a directory, a
            database file, a table) it raises `BackendError` instead, creating nothing
            (PostgreSQL at the first call, which is when it looks).

    Raises:
        InvalidKey: the identity is invalid (before any I/O).
        BerthError: unknown scheme, or its extra is not installed.
    """
    sealer = store_sealer(url, identity, sealer)
    create = options.get("create", True)  # a witness opened with create=False creates nothing either
    witness_backend = open_backend(witness, create=create) if isinstance(witness, str) else witness
    backend = open_backend(url, **options)
    return Store(
        backend,
        identity=identity,
        sealer=sealer,
        accept_plaintext=accept_plaintext,
        max_envelope_bytes=max_envelope_bytes,
        clock=clock,
        witness=witness_backend,
    )


publish(globals())  # its public names read as berth.X
