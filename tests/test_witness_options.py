"""The witness honours its own URL's options (issue 35), and only those: never the store's.

A witness is a second location with a URL of its own; its query options (SQLite's `synchronous`
and `busy_timeout`, PostgreSQL's `schema`, Redis's `prefix`, ...) reach the witness backend,
sync, `berth.aio` and `--witness` alike, and the store's keyword options do not.
Cheap: a few SQLite files, one PostgreSQL pool and one Redis client (about 1 s).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import berth
import berth.aio
from berth._cli import cli
from berth.backends.sqlite import SqliteBackend
from tests.conftest import require

psycopg = require("psycopg", "PostgreSQL")
redis = require("redis", "Redis")

IDENTITY = "wit"
SEALER = berth.AesGcmSealer(berth.Keyring.generate())


def sqlite_of(backend: Any) -> SqliteBackend:
    inner = getattr(backend, "sync", backend)  # berth.aio runs SQLite in threads over the sync backend
    assert isinstance(inner, SqliteBackend), inner
    return inner


def test_the_witness_takes_its_own_url_options_not_the_stores(tmp_path: Path) -> None:
    witness = f"sqlite:///{tmp_path}/w.db?synchronous=NORMAL&busy_timeout=2.5"
    with berth.open_store(
        f"sqlite:///{tmp_path}/s.db", identity=IDENTITY, sealer=SEALER, witness=witness, synchronous="EXTRA"
    ) as store:
        store.save("k", berth.Envelope(provider="p", provider_state={"n": 1}))
        assert store.load("k") is not None
        records = sqlite_of(store.frames.records)
        assert (records._synchronous, records._busy_timeout) == ("NORMAL", 2.5)
        frames = sqlite_of(store.backend)
        assert (frames._synchronous, frames._busy_timeout) == ("EXTRA", 30.0)  # the store's keyword: its own
        assert store.audit().ok


def test_the_async_witness_takes_its_own_url_options(tmp_path: Path) -> None:
    async def main() -> None:
        witness = f"sqlite:///{tmp_path}/w.db?busy_timeout=1.5&synchronous=normal"
        store = berth.aio.open_store(f"sqlite:///{tmp_path}/s.db", identity=IDENTITY, sealer=SEALER, witness=witness)
        async with store:
            await store.save("k", berth.Envelope(provider="p", provider_state={"n": 1}))
            assert await store.load("k") is not None
            records = sqlite_of(store.frames.records)
            assert (records._synchronous, records._busy_timeout) == ("NORMAL", 1.5)

    asyncio.run(main())


@pytest.mark.parametrize("query", ["synchronus=NORMAL", "synchronous=OFF", "busy_timeout=soon", "mode=ro"])
def test_a_witness_option_it_cannot_honour_is_refused_before_any_io(tmp_path: Path, query: str) -> None:
    """A misspelt option used to be dropped silently: the witness then fsynced every record."""
    with pytest.raises(berth.BerthError, match="sqlite"):
        berth.open_store(
            f"sqlite:///{tmp_path}/s.db", identity=IDENTITY, sealer=SEALER, witness=f"sqlite:///{tmp_path}/w.db?{query}"
        )
    assert not (tmp_path / "w.db").exists()


def test_server_witness_url_options_reach_it(postgres_dsn: str, redis_url: str, tmp_path: Path) -> None:
    schema = f"wopt_{uuid.uuid4().hex[:8]}"
    prefix = f"wopt-{uuid.uuid4().hex[:8]}:"
    sep = "&" if "?" in postgres_dsn else "?"
    for witness in (
        f"{postgres_dsn}{sep}schema={schema}&pool_max_size=2",
        f"{redis_url}?prefix={prefix}&check_durability=false",
    ):
        with berth.open_store(f"sqlite:///{tmp_path}/s.db", identity=IDENTITY, sealer=SEALER, witness=witness) as store:
            store.save("k", berth.Envelope(provider="p", provider_state={"n": 1}))
            assert list(store.frames.records.scan(f"{IDENTITY}:witness/")) == [f"{IDENTITY}:witness/k"]
            assert store.claim("k") is not None
    try:
        with berth.open_store(f"{postgres_dsn}{sep}schema={schema}", identity=IDENTITY, sealer=SEALER) as raw:
            assert list(raw.backend.scan(f"{IDENTITY}:witness/")) == [f"{IDENTITY}:witness/k"]  # in its schema
    finally:
        client = redis.Redis.from_url(redis_url)
        client.delete(*client.keys(f"{prefix}*") or ["-"])
        client.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_cli_witness_url_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keyring = tmp_path / "keys.json"
    berth.Keyring.generate().save(keyring)
    for name in ("BERTH_KMS", "BERTH_DEBUG", "BERTH_WITNESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    env = {"BERTH_URL": f"sqlite:///{tmp_path}/s.db", "BERTH_IDENTITY": IDENTITY, "BERTH_KEYRING": str(keyring)}

    def berth_cli(*args: str) -> Any:
        result = CliRunner().invoke(cli, list(args), env=env, input='{"n": 1}', prog_name="berth")
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        return result

    good = f"sqlite:///{tmp_path}/w.db?synchronous=NORMAL"
    parked = berth_cli("--witness", good, "park", "k", "--provider", "p", "--state", "-")
    assert parked.exit_code == 0, parked.stderr
    assert berth_cli("--witness", good, "audit").exit_code == 0
    bad = berth_cli("--witness", f"sqlite:///{tmp_path}/w.db?synchronus=NORMAL", "audit")
    assert bad.exit_code == 2 and "synchronus" in bad.stderr, (bad.exit_code, bad.stderr)
