"""The dynamodb:// backend against a moto server: the full store contract, large frames in parts, torn
frames refused, throttling, a missing table, listing by Query."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import berth
import berth.aio
from berth._errors import StoreMissing
from berth.testing import AsyncStoreContract, StoreContract, make_envelope
from tests.backends._aws import isolate_aws
from tests.backends._conditional import check_conditional_puts
from tests.conftest import closing_what_it_opens, require
from tests.fakes.proxy import FaultyProxy

boto3 = require("boto3", "DynamoDB")
from berth.backends.dynamodb import HEAD_BYTES, ITEM_BYTES, TTL_GRACE, DynamoDbBackend  # noqa: E402

pytestmark = pytest.mark.dynamodb


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials, no shared config: nothing here can reach AWS."""
    isolate_aws(monkeypatch, tmp_path)


_clients: list[Any] = []


@pytest.fixture(autouse=True)
def close_what_tests_open(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every backend and client a test opens; what it leaked warns in it (tests/conftest.py)."""
    yield from closing_what_it_opens(monkeypatch, DynamoDbBackend, _clients)


@pytest.fixture
def raw(moto_url: str) -> Any:
    client = boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1")
    _clients.append(client)
    return client


def _new_table(moto_url: str) -> str:
    name = f"berth-{uuid.uuid4().hex[:20]}"
    DynamoDbBackend.from_url(f"dynamodb://{name}?endpoint_url={moto_url}").setup()
    return name


@pytest.fixture
def table(moto_url: str) -> str:
    return _new_table(moto_url)


@pytest.fixture
def backend(moto_url: str, table: str) -> DynamoDbBackend:
    return DynamoDbBackend(table, endpoint_url=moto_url)


class TestDynamoDbContract(StoreContract):
    # moto's DynamoDB answers a request in ~25 ms here (its S3 is faster): fewer keys in the process
    # race and every 8th byte tampered keep the default run's share near a minute; the slow run below
    # (`-m slow`) repeats every case through berth.aio.
    process_race_keys = 60
    tamper_stride = 8

    @pytest.fixture
    def backend_opener(self, moto_url: str, table: str):
        return functools.partial(DynamoDbBackend.from_url, f"dynamodb://{table}", endpoint_url=moto_url)

    @pytest.mark.slow
    def test_list_many(self, store: berth.Store) -> None:
        """1,200 writes: minutes on moto, so behind `-m slow`; paging is tested by the paged-query case below."""
        super().test_list_many(store)


@pytest.mark.slow
class TestDynamoDbAsyncContract(AsyncStoreContract, TestDynamoDbContract):
    """The same cases through berth.aio (this backend in worker threads): behind `-m slow` for time."""


# --- the URL, the table --------------------------------------------------------------------


def test_url_options_and_setup_through_open_store(moto_url: str) -> None:
    name = f"berth-{uuid.uuid4().hex[:20]}"
    url = f"dynamodb://{name}?region=eu-west-1&endpoint_url={moto_url}&page_size=50"
    with pytest.raises(StoreMissing, match="table does not exist"):
        berth.open_store(url, identity="i", sealer=berth.PlaintextSealer()).load("k")
    store = berth.open_store(url, identity="i", sealer=berth.PlaintextSealer())
    assert isinstance(store.backend, DynamoDbBackend)
    assert store.backend._client.meta.region_name == "eu-west-1"
    store.backend.setup()
    store.backend.setup()  # idempotent
    store.save("k", make_envelope())
    assert store.claim("k") is not None
    store.close()


@pytest.mark.parametrize(
    "url", ["dynamodb://", "dynamodb://ab", "dynamodb://t@ble", "dynamodb://table/x", "dynamodb://table?colour=red"]
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(berth.BerthError):
        DynamoDbBackend.from_url(url)


def test_berth_setup_creates_the_table_and_other_commands_refuse_without_it(moto_url: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from berth._cli import cli

    name = f"berth-{uuid.uuid4().hex[:20]}"
    env = {"BERTH_URL": f"dynamodb://{name}?endpoint_url={moto_url}", "BERTH_IDENTITY": "i"}
    missing = CliRunner().invoke(cli, ["ls"], env=env)
    assert missing.exit_code == 66, missing.output
    made = CliRunner().invoke(cli, ["setup", "--url", env["BERTH_URL"]], env=env)
    assert made.exit_code == 0 and "store ready" in made.output, made.output
    assert CliRunner().invoke(cli, ["ls"], env=env).exit_code == 0


def test_a_table_of_another_key_schema_is_refused(moto_url: str, raw: Any) -> None:
    name = f"berth-{uuid.uuid4().hex[:20]}"
    raw.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
    )
    with pytest.raises(berth.BackendError, match="another key schema"):
        DynamoDbBackend(name, endpoint_url=moto_url).setup()


# --- items and versions ----------------------------------------------------------------------


def test_one_item_per_frame_keyed_by_identity_and_key(backend: DynamoDbBackend, raw: Any) -> None:
    frame = bytes(range(256)) * 8
    token = backend.put("pr-bot/org/repo#42", frame)
    item = raw.get_item(TableName=backend.table, Key={"pk": {"S": "pr-bot"}, "sk": {"S": "org/repo#42"}})["Item"]
    assert item["ver"]["S"] == token.value and int(item["size"]["N"]) == len(frame)
    assert item["head"]["B"] == frame[:HEAD_BYTES] and item["head"]["B"] + item["body"]["B"] == frame
    assert backend.get("pr-bot/org/repo#42") == (frame, token)
    again = backend.put("pr-bot/org/repo#42", frame)
    assert again != token, "identical bytes get a fresh version"
    with pytest.raises(berth.TokenMismatch):
        backend.delete("pr-bot/org/repo#42", token)
    backend.delete("pr-bot/org/repo#42", again)
    assert backend.get("pr-bot/org/repo#42") is None


def test_conditional_puts(backend: DynamoDbBackend) -> None:
    check_conditional_puts(backend, foreign_token=berth.Token(7))


def test_names_that_are_not_identity_slash_key_are_refused_before_io(backend: DynamoDbBackend) -> None:
    for name in ("nokey", "i/", "/k", "i/" + "k" * 1025):
        with pytest.raises(berth.InvalidKey):
            backend.put(name, b"x")


# --- listing: a Query of one partition -------------------------------------------------------


def test_listing_is_a_paged_query_of_the_identity_partition(moto_url: str, table: str) -> None:
    backend = DynamoDbBackend(table, endpoint_url=moto_url, page_size=7)
    calls: list[str] = []
    backend._client.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))
    names = [f"i/{n:03d}" for n in range(30)]
    for name in [*names, "other/000", "i2/000"]:
        backend.put(name, name.encode())
    calls.clear()
    assert list(backend.scan("i/")) == names
    assert calls == ["Query"] * 5, "30 names, 7 a page: five pages, never a table scan"
    calls.clear()
    assert [n for n, *_ in backend.heads("i/01", 1)] == names[10:20]
    assert calls == ["Query"] * 2
    assert [n for n, *_ in backend.sorted_heads("i/", 1, limit=3, reverse=True)] == names[:-4:-1]
    frames = list(backend.sorted_frames("i/", limit=2, reverse=True, before="i/020"))
    assert [(n, d) for n, d, _ in frames] == [("i/019", b"i/019"), ("i/018", b"i/018")]
    assert sorted(backend.scan("i")) == [*names, "i2/000"], "a prefix with no '/' falls back to a scan"


# --- frames over the item limit: parts, all or nothing -----------------------------------------


def _parts(raw: Any, table: str, name: str) -> list[dict[str, Any]]:
    pages = raw.get_paginator("query").paginate(
        TableName=table, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": name}}
    )
    return [item for page in pages for item in page["Items"]]


def test_a_mebibyte_frame_round_trips_in_parts_and_its_old_parts_go(backend: DynamoDbBackend, raw: Any) -> None:
    big = hashlib.sha256(b"seed").digest() * (1 << 15)  # 1 MiB
    token = backend.put("i/big", big)
    assert backend.get("i/big") == (big, token)
    parts = _parts(raw, backend.table, "i/big")
    assert len(parts) == -(-len(big) // ITEM_BYTES) == 3
    assert [n for n, *_ in backend.heads("i/", 16)] == ["i/big"], "parts are never listed"
    assert backend.head("i/big", 16) == (big[:16], token)
    bigger = big + b"more"
    newer = backend.put("i/big", bigger, if_match=token)
    assert backend.get("i/big") == (bigger, newer)
    assert {p["sk"]["S"].split("/")[0] for p in _parts(raw, backend.table, "i/big")} == {newer.value}
    small = backend.put("i/big", b"small now")  # an unconditional save over a frame in parts
    assert _parts(raw, backend.table, "i/big") == [] and backend.get("i/big") == (b"small now", small)
    last = backend.put("i/big", big)
    backend.delete("i/big", last)
    assert _parts(raw, backend.table, "i/big") == [] and backend.get("i/big") is None


def test_a_large_envelope_through_the_store(moto_url: str, table: str) -> None:
    store = berth.open_store(
        f"dynamodb://{table}", identity="i", sealer=berth.AesGcmSealer(berth.Keyring.generate()), endpoint_url=moto_url
    )
    store.save("k", make_envelope(provider_state={"blob": "x" * 1_200_000}))
    assert [item.key for item in store.list()] == ["k"]
    env = store.claim("k")
    assert env is not None and len(env.provider_state) > 1_200_000
    store.close()


def test_a_torn_frame_is_refused_and_a_lost_manifest_is_absent(backend: DynamoDbBackend, raw: Any) -> None:
    big = b"0123456789abcdef" * 65536
    token = backend.put("i/torn", big)
    parts = _parts(raw, backend.table, "i/torn")
    first = {"pk": parts[0]["pk"], "sk": parts[0]["sk"]}
    raw.put_item(TableName=backend.table, Item={**first, "body": {"B": b"changed" + parts[0]["body"]["B"][7:]}})
    with pytest.raises(berth.IntegrityError, match="torn"):
        backend.get("i/torn")
    raw.delete_item(TableName=backend.table, Key=first)  # a part missing
    with pytest.raises(berth.IntegrityError, match="torn"):
        backend.get("i/torn")
    heads = list(backend.heads("i/", 2048))  # a header longer than `head` holds: the frame is read
    assert [(n, type(h)) for n, h, *_ in heads] == [("i/torn", berth.IntegrityError)]
    raw.put_item(TableName=backend.table, Item=parts[0])  # whole again
    assert backend.get("i/torn") == (big, token)
    raw.delete_item(TableName=backend.table, Key={"pk": {"S": "i"}, "sk": {"S": "torn"}})  # the manifest gone
    assert backend.get("i/torn") is None and list(backend.scan("i/")) == []


def test_orphaned_parts_of_a_killed_writer_are_dropped_by_a_later_large_save(
    backend: DynamoDbBackend, raw: Any
) -> None:
    orphan = "000000000001" + "ab" * 10 + ".2"  # written long ago, its manifest never landed
    for i in range(2):
        raw.put_item(
            TableName=backend.table,
            Item={"pk": {"S": "i/k"}, "sk": {"S": f"{orphan}/{i:06d}"}, "body": {"B": b"x"}},
        )
    assert backend.get("i/k") is None
    token = backend.put("i/k", b"y" * (ITEM_BYTES + 1))
    assert {p["sk"]["S"].split("/")[0] for p in _parts(raw, backend.table, "i/k")} == {token.value}


# --- throttling and errors -----------------------------------------------------------------


def _target(op: str) -> Any:
    return lambda where: where.endswith(f"DynamoDB_20120810.{op}")


def test_throttling_is_retried_then_a_backend_error(moto_url: str, table: str) -> None:
    with FaultyProxy(moto_url) as proxy:
        backend = DynamoDbBackend(table, endpoint_url=proxy.url, retry_attempts=2)
        proxy.fail("POST", "throttle", _target("PutItem"))
        token = backend.put("i/k", b"frame")  # an unconditional put is repeated only when throttled
        assert backend.get("i/k") == (b"frame", token)
        proxy.reset_counts()
        proxy.fail("POST", "throttle", _target("GetItem"))
        proxy.fail("POST", "throttle", _target("GetItem"))
        with pytest.raises(berth.BackendError, match="throttled, retry later") as info:
            backend.get("i/k")
        assert not isinstance(info.value, berth.TokenMismatch)
        assert proxy.count("POST", _target("GetItem")) == 2
        proxy.fail("POST", "503", _target("PutItem"))
        with pytest.raises(berth.BackendError):
            backend.put("i/k", b"new")  # never repeated after an ambiguous failure
        assert backend.get("i/k") == (b"frame", token), "a failed save leaves the previous frame"
        backend.close()


def test_a_retried_delete_that_finds_its_item_gone_is_unknown_not_lost(moto_url: str, table: str) -> None:
    with FaultyProxy(moto_url) as proxy:
        backend = DynamoDbBackend(table, endpoint_url=proxy.url)
        token = backend.put("i/k", b"frame")
        proxy.fail("POST", "reset_after", _target("DeleteItem"))
        with pytest.raises(berth.BackendError, match="unknown outcome") as info:
            backend.delete("i/k", token)
        assert not isinstance(info.value, berth.TokenMismatch)
        assert backend.get("i/k") is None
        backend.close()


# --- the TTL backstop: every item of a frame expires with its run --------------------------------

_DEADLINE = datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone.utc)


def _item(raw: Any, table: str, pk: str, sk: str) -> dict[str, Any]:
    found: dict[str, Any] = raw.get_item(TableName=table, Key={"pk": {"S": pk}, "sk": {"S": sk}})["Item"]
    return found


def _ttl(deadline: datetime) -> dict[str, str]:
    return {"N": str(int(deadline.timestamp()) + TTL_GRACE)}


def _store(moto_url: str, table: str, query: str = "") -> berth.Store:
    return berth.open_store(
        f"dynamodb://{table}{query}", identity="i", sealer=berth.PlaintextSealer(), endpoint_url=moto_url
    )


def test_a_saved_frame_carries_its_deadline_as_ttl_and_a_resave_moves_it(moto_url: str, table: str, raw: Any) -> None:
    store = _store(moto_url, table)
    store.save("k", make_envelope(deadline=_DEADLINE))
    assert _item(raw, table, "i", "k")["expires_at"] == _ttl(_DEADLINE) == {"N": "1935821289"}
    later = _DEADLINE + timedelta(days=3, seconds=1)
    store.save("k", make_envelope(deadline=later))
    assert _item(raw, table, "i", "k")["expires_at"] == _ttl(later)
    store.save("k", make_envelope(deadline=None))
    assert "expires_at" not in _item(raw, table, "i", "k"), "no deadline: no TTL, the old one gone"
    store.close()


def test_every_part_of_a_large_frame_carries_the_manifest_ttl(moto_url: str, table: str, raw: Any) -> None:
    store = _store(moto_url, table)
    store.save("big", make_envelope(deadline=_DEADLINE, provider_state={"blob": "x" * 1_000_000}))
    manifest = _item(raw, table, "i", "big")
    parts = _parts(raw, table, "i/big")
    assert len(parts) == 3 and manifest["expires_at"] == _ttl(_DEADLINE)
    assert [part["expires_at"] for part in parts] == [_ttl(_DEADLINE)] * 3
    store.close()


def test_ttl_attribute_names_the_attribute_and_empty_sets_none(moto_url: str, table: str, raw: Any) -> None:
    named = _store(moto_url, table, "?ttl_attribute=gone_by")
    named.save("k", make_envelope(deadline=_DEADLINE))
    item = _item(raw, table, "i", "k")
    assert item["gone_by"] == _ttl(_DEADLINE) and "expires_at" not in item
    off = _store(moto_url, table, "?ttl_attribute=")
    off.save("k", make_envelope(deadline=_DEADLINE))
    assert not {"gone_by", "expires_at"} & set(_item(raw, table, "i", "k"))
    off.save("big", make_envelope(deadline=_DEADLINE, provider_state={"blob": "x" * 500_000}))
    assert all("expires_at" not in item for item in [_item(raw, table, "i", "big"), *_parts(raw, table, "i/big")])
    named.close()
    off.close()


@pytest.mark.parametrize("name", ["ver", "pk", "digest", "x" * 256])
def test_a_ttl_attribute_berth_uses_or_too_long_is_refused(name: str) -> None:
    with pytest.raises(berth.BerthError, match="ttl_attribute"):
        DynamoDbBackend("table", ttl_attribute=name, endpoint_url="http://127.0.0.1:9")


def test_setup_enables_ttl_on_the_table_it_creates(moto_url: str, raw: Any) -> None:
    name = _new_table(moto_url)
    ttl = raw.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}
    bare = f"berth-{uuid.uuid4().hex[:20]}"
    DynamoDbBackend.from_url(f"dynamodb://{bare}?endpoint_url={moto_url}&ttl_attribute=").setup()
    assert raw.describe_time_to_live(TableName=bare)["TimeToLiveDescription"]["TimeToLiveStatus"] == "DISABLED"


def test_bytes_that_are_no_frame_get_no_ttl_and_no_error(backend: DynamoDbBackend, raw: Any) -> None:
    frame = bytes(_store_frame(backend))
    torn_header = frame[:20] + b"{" * 40 + frame[60:]
    for n, data in enumerate([b"", b"not a frame", b"\x89BERTH\r\n\x09" + frame[9:], torn_header, frame[:30]]):
        token = backend.put(f"i/foreign{n}", data)
        assert backend.get(f"i/foreign{n}") == (data, token)
        assert "expires_at" not in _item(raw, backend.table, "i", f"foreign{n}")
    backend.put("i/copy", frame)  # a frame put straight through the backend (under another key) has one
    assert _item(raw, backend.table, "i", "copy")["expires_at"] == _ttl(_DEADLINE)


def _store_frame(backend: DynamoDbBackend) -> bytes:
    store = berth.Store(backend, identity="i", sealer=berth.PlaintextSealer())
    store.save("source", make_envelope(deadline=_DEADLINE))
    found = backend.get("i/source")
    assert found is not None
    return bytes(found[0])


def test_an_async_save_sets_the_ttl(moto_url: str, table: str, raw: Any) -> None:
    async def run() -> None:
        store = berth.aio.open_store(
            f"dynamodb://{table}", identity="i", sealer=berth.PlaintextSealer(), endpoint_url=moto_url
        )
        await store.save("k", make_envelope(deadline=_DEADLINE))
        await store.aclose()

    asyncio.run(run())
    assert _item(raw, table, "i", "k")["expires_at"] == _ttl(_DEADLINE)
