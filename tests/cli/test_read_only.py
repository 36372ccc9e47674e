"""Read-only never creates (issue 34): a mistyped URL is an error naming what is missing, exit 66,
never an empty store made on the spot; `berth setup` (or a first `park`) creates a store, and
`open_store(..., create=False)` opens only what exists."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import berth
import berth.aio
from berth._cli._failures import NOT_FOUND
from tests.test_cli import fails, ok, run

READ_ONLY = [["ls"], ["show", "k"], ["show", "k", "--raw"], ["questions"], ["verify"], ["claim", "k"], ["sweep"]]


@pytest.mark.parametrize("scheme", ["sqlite", "file"])
@pytest.mark.parametrize("args", READ_ONLY, ids=lambda a: " ".join(a))
def test_a_command_that_creates_nothing_refuses_a_missing_store_naming_it(
    home: Path, scheme: str, args: list[str]
) -> None:
    missing = home / "nonexistent-dir" / ("x.db" if scheme == "sqlite" else "store")
    url = f"{scheme}://{missing}" if scheme == "file" else f"sqlite:///{missing}"
    fails(NOT_FOUND, *args, "--url", url, says=[str(missing), "does not exist", "berth setup"])
    assert not (home / "nonexistent-dir").exists()
    result = run(*args, "--url", url, "--json")
    assert json.loads(result.stdout)["error"] == "not_found" and result.exit_code == NOT_FOUND


def test_an_sqlite_file_without_a_store_is_not_one(home: Path) -> None:
    empty = home / "empty.db"
    empty.touch()
    fails(NOT_FOUND, "ls", "--url", f"sqlite:///{empty}", says=[str(empty), "holds no berth store"])
    assert empty.stat().st_size == 0


def test_the_default_store_is_not_created_by_reading_it(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTH_URL")
    data = home / "fresh-xdg"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    fails(NOT_FOUND, "ls", says=["berth.db", "does not exist"])
    assert not data.exists()
    ok("park", "k", "--state", "-", input="{}")  # a first park creates it, as a host's first save does
    assert "k" in ok("ls").stdout and (data / "berth" / "berth.db").is_file()


def test_setup_creates_the_store_then_it_reads_as_empty(home: Path) -> None:
    url = f"sqlite:///{home}/new/berth.db"
    assert ok("setup", "--url", url).stdout.startswith("store ready at")
    assert ok("setup", "--url", url).stdout.startswith("store ready at")  # idempotent
    result = ok("ls", "--url", url)
    assert result.stdout == "" and "nothing parked" in result.stderr
    doc = json.loads(ok("setup", "--url", f"file://{home}/dir-store", "--json").stdout)
    assert doc["identity"] == "pr-bot" and (home / "dir-store").is_dir()
    assert ok("ls", "--url", f"file://{home}/dir-store", "--json").stdout == "[]\n"


def test_open_store_with_create_false_opens_only_what_exists(tmp_path: Path) -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    for url in (f"sqlite:///{tmp_path}/a/x.db", f"file://{tmp_path}/b/store"):
        with pytest.raises(berth.BackendError, match="does not exist"):
            berth.open_store(url, identity="i", sealer=sealer, create=False)
        with pytest.raises(berth.BackendError, match="does not exist"):
            berth.open_questions(url, identity="i", sealer=sealer, create=False)
        berth.open_store(url, identity="i", sealer=sealer).close()  # create=True, the default
        with berth.open_store(url, identity="i", sealer=sealer, create=False) as store:
            store.save("k", berth.Envelope(provider_state=b"{}"))
            assert store.claim("k") is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    with berth.open_store("memory://", identity="i", sealer=sealer, create=False) as store:  # nothing to create
        assert list(store.list()) == []


@pytest.fixture
def pg_url(postgres_dsn: str) -> Iterator[str]:
    """A store URL on the test server in a schema of this test's own, dropped afterwards."""
    import psycopg

    schema = f"berth_ro_{uuid.uuid4().hex[:12]}"
    yield f"{postgres_dsn}?schema={schema}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _pg_schema_exists(url: str) -> bool:
    import psycopg

    dsn, _, query = url.partition("?schema=")
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (query,)).fetchone() is not None


@pytest.mark.parametrize("args", READ_ONLY, ids=lambda a: " ".join(a))
def test_postgresql_without_its_table_is_not_found_and_gets_none(home: Path, pg_url: str, args: list[str]) -> None:
    fails(NOT_FOUND, *args, "--url", pg_url, says=["has no berth table", ".frames", "berth setup"])
    result = run(*args, "--url", pg_url, "--json")
    assert json.loads(result.stdout.splitlines()[-1])["error"] == "not_found" and result.exit_code == NOT_FOUND
    assert not _pg_schema_exists(pg_url)  # no schema, no table: nothing was created


def test_postgresql_setup_then_read_only_commands_work(home: Path, pg_url: str) -> None:
    assert "(schema version 1)" in ok("setup", "--url", pg_url).stdout
    assert _pg_schema_exists(pg_url)
    assert "nothing parked" in ok("ls", "--url", pg_url).stderr
    ok("park", "k", "--state", "-", "--url", pg_url, input="{}")
    assert json.loads(ok("ls", "--url", pg_url, "--json").stdout)[0]["key"] == "k"


def test_open_store_with_create_false_on_postgresql_creates_nothing(pg_url: str) -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    store = berth.open_store(pg_url, identity="i", sealer=sealer, create=False)  # opening makes no connection
    with pytest.raises(berth.BackendError, match="has no berth table"):
        list(store.list())
    with pytest.raises(berth.BackendError, match="has no berth table"):
        store.save("k", berth.Envelope(provider_state=b"{}"))  # a write creates nothing either
    store.close()

    async def asynchronously() -> None:
        async with berth.aio.open_store(pg_url, identity="i", sealer=sealer, create=False) as astore:
            with pytest.raises(berth.BackendError, match="has no berth table"):
                await astore.load("k")

    asyncio.run(asynchronously())
    assert not _pg_schema_exists(pg_url)
    berth.open_store(pg_url, identity="i", sealer=sealer).close()
    with berth.open_store(pg_url, identity="i", sealer=sealer) as store:
        store.save("k", berth.Envelope(provider_state=b"{}"))  # the default creates on first use
    with berth.open_store(pg_url, identity="i", sealer=sealer, create=False) as store:
        assert [item.key for item in store.list()] == ["k"]


def test_open_store_with_create_false_on_a_backend_that_creates_nothing(redis_url: str) -> None:
    sealer = berth.AesGcmSealer(berth.Keyring.generate())
    prefix = f"berth-ro-{uuid.uuid4().hex[:8]}"
    url = f"{redis_url}?prefix={prefix}&check_durability=false"

    async def asynchronously() -> list[str]:
        async with berth.aio.open_store(url, identity="i", sealer=sealer, create=False) as astore:
            return [item.key async for item in astore.list()]

    assert asyncio.run(asynchronously()) == []  # the native async backend takes create=False too
    with berth.open_store(url, identity="i", sealer=sealer, create=False) as store:
        assert list(store.list()) == []


def test_a_witness_is_not_created_by_a_read_only_command(home: Path) -> None:
    witness = home / "audit" / "witness.db"
    fails(NOT_FOUND, "ls", "--witness", f"sqlite:///{witness}", says=[str(witness), "does not exist"])
    fails(NOT_FOUND, "verify", "--witness", f"sqlite:///{witness}", says=[str(witness), "does not exist"])
    assert not (home / "audit").exists()
    ok("park", "k", "--state", "-", "--witness", f"sqlite:///{witness}", input="{}")  # a park creates it
    assert "k" in ok("ls", "--witness", f"sqlite:///{witness}").stdout
