"""Workloads 1 and 5: the park/wake cycle (save, load, conditional delete) of a 64 KiB chat state.

Every contender takes the state as Python objects and hands it back as Python
objects, sealed with AES-GCM (except the unencrypted LangGraph peer), so each
one pays for its JSON codec, its crypto and its durable statements.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from _common import DEADLINE, KEY, Variant

import berth

IDENTITY = "bench"


def sealer() -> berth.AesGcmSealer:
    """An AES-256-GCM sealer under the suite's fixed key."""
    return berth.AesGcmSealer(berth.Keyring({"bench-1": KEY}, "bench-1"))


_CALL = berth.PendingCall("toolu_approve", "ask_maintainer", {"question": "push to main?"})


def chat_envelope(messages: list[dict[str, Any]]) -> berth.Envelope:
    """What a berth contender parks: the chat state, built into an envelope with one pending question."""
    return berth.Envelope(
        provider_state=messages,
        provider="anthropic",
        model="claude-x",
        run_id="run-1",
        pending_calls=(_CALL,),
        reason="awaiting answer",
        deadline=DEADLINE,
    )


def berth_variant(url: str, messages: list[dict[str, Any]], *, name: str = "berth sealed", **options: Any) -> Variant:
    """berth: build the envelope, save, load, decode the state, delete with the token."""
    store = berth.open_store(url, identity=IDENTITY, sealer=sealer(), **options)
    key = f"org/repo#{os.getpid()}"

    def op() -> None:
        store.save(key, chat_envelope(messages))
        parked = store.load(key)
        assert parked is not None
        state = parked.envelope.state()
        assert len(state) == len(messages)
        store.delete(key, parked.token)

    def teardown() -> None:
        try:
            store.claim(key)
        finally:
            store.close()

    return Variant(name, op, "berth", teardown=teardown, handle=store)


def floor_variant(floor: Any, messages: list[dict[str, Any]], *, name: str = "floor (raw client)") -> Variant:
    """The raw client: the same statements, AES-GCM and orjson, nothing else."""
    key = f"{IDENTITY}/org/repo#{os.getpid()}"

    def op() -> None:
        floor.save(key, messages)
        found = floor.load(key)
        assert found is not None
        state, gen = found
        assert len(state) == len(messages)
        floor.delete(key, gen)

    return Variant(name, op, "floor", teardown=floor.close, handle=floor)


# --- LangGraph ----------------------------------------------------------------------------

CHECKPOINT_ID = "1f0a6c7e-0000-6000-8000-000000000001"


def _checkpoint(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "v": 2,
        "id": CHECKPOINT_ID,
        "ts": "2026-11-30T08:00:00+00:00",
        "channel_values": {"messages": messages},
        "channel_versions": {"messages": 1},
        "versions_seen": {},
        "pending_sends": [],
        "updated_channels": None,
    }


def langgraph_serdes() -> dict[str, Callable[[], Any]]:
    """LangGraph's serializers: default (unencrypted), EncryptedSerializer with AES-GCM, and its default EAX."""
    from Crypto.Cipher import AES
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    return {
        "LangGraph unencrypted": lambda: None,
        "LangGraph EncryptedSerializer GCM": lambda: EncryptedSerializer.from_pycryptodome_aes(
            key=KEY, mode=AES.MODE_GCM
        ),
        "LangGraph EncryptedSerializer EAX (default)": lambda: EncryptedSerializer.from_pycryptodome_aes(key=KEY),
    }


def _langgraph_variant(saver: Any, messages: list[dict[str, Any]], name: str, close: Callable[[], None]) -> Variant:
    thread = f"thread-{os.getpid()}-{abs(hash(name)) % 10_000}"
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    get_config = {"configurable": {"thread_id": thread}}
    checkpoint = _checkpoint(messages)
    metadata = {"source": "loop", "step": 1}

    def op() -> None:
        saver.put(config, checkpoint, metadata, {"messages": 1})
        found = saver.get_tuple(get_config)
        assert found is not None
        assert len(found.checkpoint["channel_values"]["messages"]) == len(messages)
        saver.delete_thread(thread)

    return Variant(name, op, "peer", teardown=close, handle=saver)


def langgraph_sqlite_variants(path: str, messages: list[dict[str, Any]], only: str | None = None) -> list[Variant]:
    """SqliteSaver on the same database file, WAL and synchronous=FULL like berth."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    out = []
    for name, make in langgraph_serdes().items():
        if only and name != only:
            continue
        conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(conn, serde=make())
        saver.setup()
        out.append(_langgraph_variant(saver, messages, name, conn.close))
    return out


def langgraph_postgres_variants(dsn: str, messages: list[dict[str, Any]], only: str | None = None) -> list[Variant]:
    """PostgresSaver on the same database, one autocommit connection each (its documented setup)."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg import Connection
    from psycopg.rows import dict_row

    out = []
    for name, make in langgraph_serdes().items():
        if only and name != only:
            continue
        conn = Connection.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        saver = PostgresSaver(conn, serde=make())
        saver.setup()
        out.append(_langgraph_variant(saver, messages, name, conn.close))
    return out


# --- one group per backend ----------------------------------------------------------------

BACKENDS = ("file", "sqlite", "postgres", "redis", "s3", "gcs", "dynamodb", "azblob", "redis-cluster")
BUCKET = "berth-bench"


def backend_available(backend: str, ctx: dict[str, Any]) -> str | None:
    """None if the backend can be benchmarked here, else why not."""
    import importlib

    module = {
        "postgres": "postgres",
        "redis": "redis",
        "s3": "s3",
        "gcs": "gcs",
        "dynamodb": "dynamodb",
        "azblob": "azblob",
        "redis-cluster": "redis",
    }.get(backend)
    if module:
        try:
            importlib.import_module(f"berth.backends.{module}")
        except ImportError as exc:
            return f"berth.backends.{module} does not import yet ({exc})"
        server = {
            "postgres": "postgres",
            "redis": "redis",
            "s3": "moto",
            "gcs": "gcs",
            "dynamodb": "moto",
            "azblob": "azurite",
            "redis-cluster": "redis_cluster",
        }[backend]
        if not ctx.get(server):
            return f"no {server} server ({ctx.get('skipped', {}).get(server, 'not started')})"
    return None


def berth_url(backend: str, ctx: dict[str, Any], tag: str) -> tuple[str, dict[str, Any]]:
    """The store URL (and open_store options) of `backend` for one group of the run."""
    if backend == "file":
        return f"file://{ctx['dir']}/files-{tag}", {}
    if backend == "sqlite":
        return f"sqlite:///{ctx['dir']}/{tag}.db", {}
    if backend == "postgres":
        return f"{ctx['postgres']}?schema=bench_{tag.replace('-', '_')}", {}
    if backend == "redis":
        return ctx["redis"], {}
    if backend == "s3":
        return f"s3://{BUCKET}/berth-{tag}", {"endpoint_url": ctx["moto"]}
    if backend == "gcs":
        return f"gs://{BUCKET}/berth-{tag}", {}
    if backend == "dynamodb":  # one table, as all groups share one Redis database
        return f"dynamodb://{BUCKET}?endpoint_url={ctx['moto']}&region=us-east-1", {}
    if backend == "azblob":
        return f"azblob://{BUCKET}/berth-{tag}", {"connection_string": ctx["azurite"]}
    if backend == "redis-cluster":
        return ctx["redis_cluster"], {}
    raise ValueError(backend)


def make_floor(backend: str, ctx: dict[str, Any], tag: str) -> Any:
    """The raw-client floor of `backend`, on the same database, directory, server or bucket as berth."""
    from _floors import (
        AzblobFloor,
        DynamoDbFloor,
        FileFloor,
        GcsFloor,
        PostgresFloor,
        RedisClusterFloor,
        RedisFloor,
        S3Floor,
        SqliteFloor,
    )

    if backend == "file":
        return FileFloor(f"{ctx['dir']}/floor-{tag}")
    if backend == "sqlite":
        return SqliteFloor(f"{ctx['dir']}/{tag}.db")
    if backend == "postgres":
        return PostgresFloor(ctx["postgres"], table=f"floor_{tag.replace('-', '_')}")
    if backend == "redis":
        return RedisFloor(ctx["redis"])
    if backend == "s3":
        return S3Floor(ctx["moto"], BUCKET, prefix=f"floor-{tag}")
    if backend == "gcs":
        return GcsFloor(BUCKET, prefix=f"floor-{tag}")
    if backend == "dynamodb":
        return DynamoDbFloor(ctx["moto"], BUCKET, prefix=f"floor-{tag}")
    if backend == "azblob":
        return AzblobFloor(ctx["azurite"], BUCKET, prefix=f"floor-{tag}")
    if backend == "redis-cluster":
        return RedisClusterFloor(ctx["redis_cluster"])
    raise ValueError(backend)


def group(
    backend: str, ctx: dict[str, Any], messages: list[dict[str, Any]], *, tag: str = "cycle", peers: bool = True
) -> list[Variant]:
    """berth, its floor and (SQLite, PostgreSQL) LangGraph's savers, all on the same storage."""
    url, options = berth_url(backend, ctx, tag)
    out = [berth_variant(url, messages, **options), floor_variant(make_floor(backend, ctx, tag), messages)]
    if peers and backend == "sqlite":
        out += langgraph_sqlite_variants(f"{ctx['dir']}/{tag}.db", messages)
    if peers and backend == "postgres":
        out += langgraph_postgres_variants(ctx["postgres"], messages)
    return out


def prepare(ctx: dict[str, Any]) -> None:
    """Create the buckets and the container the object-store backends need (opening a store creates none)."""
    if ctx.get("moto"):
        import boto3

        client = boto3.client("s3", endpoint_url=ctx["moto"], region_name="us-east-1")
        try:
            client.create_bucket(Bucket=BUCKET)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        client.close()
        try:
            from berth.backends.dynamodb import DynamoDbBackend
        except ImportError:  # a tree of berth from before the backend (benchmarks/ab.py): backend_available says so
            pass
        else:
            table = DynamoDbBackend(BUCKET, endpoint_url=ctx["moto"], region_name="us-east-1")
            table.setup()  # as `berth setup` makes it; the floor shares the table
            table.close()
    if ctx.get("gcs"):
        from google.api_core.exceptions import Conflict
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage  # type: ignore[attr-defined]

        gcs = storage.Client(project="bench", credentials=AnonymousCredentials())
        try:
            gcs.create_bucket(BUCKET)
        except Conflict:
            pass
        gcs.close()
    if ctx.get("azurite"):
        try:
            from berth.backends.azblob import AzureBlobBackend
        except ImportError:  # as above
            return
        container = AzureBlobBackend(BUCKET, connection_string=ctx["azurite"])
        container.setup()
        container.close()
