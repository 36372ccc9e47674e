"""The s3:// backend against a moto server: the full store contract, retries, outages, paging, names."""

from __future__ import annotations

import functools
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import berth
from berth.testing import AsyncStoreContract, StoreContract, make_envelope
from tests._moto import moto_command
from tests._net import free_port, wait_http
from tests.backends._aws import isolate_aws
from tests.backends._conditional import check_conditional_puts
from tests.conftest import closing_what_it_opens, require, unavailable
from tests.fakes.proxy import FaultyProxy

boto3 = require("boto3", "S3")
from berth.backends.s3 import S3Backend  # noqa: E402

pytestmark = pytest.mark.s3


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials, no shared config: nothing here can reach AWS."""
    isolate_aws(monkeypatch, tmp_path)


_clients: list[Any] = []


@pytest.fixture(autouse=True)
def close_what_tests_open(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every backend and client a test opens; what it leaked warns in it (tests/conftest.py)."""
    yield from closing_what_it_opens(monkeypatch, S3Backend, _clients)


def _raw_client(endpoint: str) -> Any:
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    _clients.append(client)
    return client


@pytest.fixture
def raw(moto_url: str) -> Any:
    return _raw_client(moto_url)


@pytest.fixture
def bucket(raw: Any) -> str:
    name = f"berth-{uuid.uuid4().hex[:20]}"
    raw.create_bucket(Bucket=name)
    return name


class TestS3Contract(StoreContract):
    @pytest.fixture
    def backend_opener(self, moto_url: str, bucket: str):
        return functools.partial(S3Backend.from_url, f"s3://{bucket}/contract", endpoint_url=moto_url)


class TestS3AsyncContract(AsyncStoreContract, TestS3Contract):
    """The same cases through berth.aio (this backend in worker threads)."""

    @pytest.mark.slow
    def test_list_many(self, store: berth.Store) -> None:
        """600 frames through worker threads, the same paging as the sync case above: behind `-m slow` for time."""
        super().test_list_many(store)


# --- the URL and its options ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "prefix", "obj"),
    [("s3://B", "", "i/k"), ("s3://B/", "", "i/k"), ("s3://B/a/b/", "a/b", "a/b/i/k"), ("s3://B/a", "a", "a/i/k")],
)
def test_prefix_handling(url: str, prefix: str, obj: str, moto_url: str, bucket: str, raw: Any) -> None:
    backend = S3Backend.from_url(url.replace("B", bucket), endpoint_url=moto_url)
    assert backend.prefix == prefix
    backend.put("i/k", b"frame")
    assert [o["Key"] for o in raw.list_objects_v2(Bucket=bucket)["Contents"]] == [obj]
    assert list(backend.scan("i/")) == ["i/k"]
    backend.close()


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "s3://b/a//c", "s3://b/p?x=1", "gs://b/p"])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(berth.BerthError):
        S3Backend.from_url(url)


def test_endpoint_from_the_environment_and_default_region(
    monkeypatch: pytest.MonkeyPatch, moto_url: str, bucket: str
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    store = berth.open_store(f"s3://{bucket}/env", identity="i", sealer=berth.PlaintextSealer())
    assert isinstance(store.backend, S3Backend)
    assert store.backend._client.meta.region_name == "us-east-1"
    assert store.backend._client.meta.endpoint_url == moto_url
    store.save("k", make_envelope())
    assert store.claim("k") is not None
    store.close()


def test_a_ready_client_is_used(moto_url: str, bucket: str) -> None:
    client = _raw_client(moto_url)
    calls: list[str] = []
    client.meta.events.register("before-call.s3", lambda model, **_: calls.append(model.name))
    backend = S3Backend.from_url(f"s3://{bucket}", client=client)
    token = backend.put("i/k", b"x")
    backend.delete("i/k", token)
    assert calls == ["PutObject", "DeleteObject"]
    backend.close()  # a client berth did not build is left open
    assert client.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


# --- ETags -----------------------------------------------------------------------------------


def test_identical_bytes_get_a_fresh_etag_and_read_back_exactly(moto_url: str, bucket: str, raw: Any) -> None:
    backend = S3Backend.from_url(f"s3://{bucket}/p", endpoint_url=moto_url)
    first = backend.put("i/k", b"same bytes")
    second = backend.put("i/k", b"same bytes")
    assert first != second
    assert backend.get("i/k") == (b"same bytes", second)
    with pytest.raises(berth.TokenMismatch):
        backend.delete("i/k", first)
    obj = raw.get_object(Bucket=bucket, Key="p/i/k")
    assert obj["Metadata"] == {"berth-pad": "16"}
    assert obj["Body"].read()[:10] == b"same bytes", "the object starts with the frame"
    backend.delete("i/k", second)
    assert backend.get("i/k") is None


def test_conditional_puts(moto_url: str, bucket: str) -> None:
    check_conditional_puts(S3Backend.from_url(f"s3://{bucket}", endpoint_url=moto_url), foreign_token=berth.Token(7))


def test_object_written_by_another_tool_is_read_verbatim(moto_url: str, bucket: str, raw: Any) -> None:
    raw.put_object(Bucket=bucket, Key="i/k", Body=b"from elsewhere")
    raw.put_object(Bucket=bucket, Key="i/empty", Body=b"")
    backend = S3Backend.from_url(f"s3://{bucket}", endpoint_url=moto_url)
    assert backend.get("i/k")[0] == b"from elsewhere"
    heads = {name: (head, full) for name, head, _, full in backend.heads("i/", 4)}
    assert heads == {"i/k": (b"from", 14), "i/empty": (b"", 0)}


def test_missing_bucket_is_a_backend_error_not_a_lost_claim(moto_url: str) -> None:
    backend = S3Backend.from_url(f"s3://berth-missing-{uuid.uuid4().hex[:12]}", endpoint_url=moto_url, retry_attempts=1)
    with pytest.raises(berth.BackendError):
        backend.delete("i/k", berth.Token('"abc"'))
    with pytest.raises(berth.BackendError):
        backend.get("i/k")


# --- names -----------------------------------------------------------------------------------


def test_names_over_the_s3_limit_are_hashed_and_listed(moto_url: str, bucket: str, raw: Any) -> None:
    backend = S3Backend.from_url(f"s3://{bucket}/deep/prefix", endpoint_url=moto_url)
    long_a, long_b, short = "i/" + "é" * 600, "i/" + "é" * 599 + "x", "i/short"
    for name in (long_a, long_b, short):
        backend.put(name, name.encode()[-8:] + b"-frame")
    keys = [o["Key"] for o in raw.list_objects_v2(Bucket=bucket)["Contents"]]
    assert all(len(k.encode()) <= 1024 for k in keys) and len(keys) == 3
    assert sorted(backend.scan("i/")) == sorted([long_a, long_b, short])
    assert list(backend.scan("i/" + "é" * 600)) == [long_a]
    assert backend.get(long_a)[0] == long_a.encode()[-8:] + b"-frame"
    heads = {name: head for name, head, _, _ in backend.heads("i/é", 3)}
    assert heads == {long_a: long_a.encode()[-8:-5], long_b: long_b.encode()[-8:-5]}
    token = backend.get(long_b)[1]
    backend.delete(long_b, token)
    assert sorted(backend.scan("i/")) == sorted([long_a, short])


# --- paging ----------------------------------------------------------------------------------


def test_listing_pages(moto_url: str, bucket: str) -> None:
    backend = S3Backend.from_url(f"s3://{bucket}/p", endpoint_url=moto_url, page_size=7)
    pages: list[int] = []
    backend._client.meta.events.register(
        "after-call.s3.ListObjectsV2", lambda parsed, **_: pages.append(parsed.get("KeyCount", 0))
    )
    names = [f"i/{n:03d}" for n in range(30)]
    for name in names:
        backend.put(name, b"x")
    assert list(backend.scan("i/")) == names
    assert pages == [7, 7, 7, 7, 2]
    assert [n for n, *_ in backend.heads("i/01", 1)] == names[10:20]


def test_listing_beyond_a_thousand_objects(moto_url: str, bucket: str, raw: Any) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: raw.put_object(Bucket=bucket, Key=f"p/i/{n:04d}", Body=b"x"), range(1005)))
    backend = S3Backend.from_url(f"s3://{bucket}/p", endpoint_url=moto_url)
    pages: list[int] = []
    backend._client.meta.events.register(
        "after-call.s3.ListObjectsV2", lambda parsed, **_: pages.append(parsed.get("KeyCount", 0))
    )
    assert sum(1 for _ in backend.scan("i/")) == 1005
    assert pages == [1000, 5]


# --- retries: only idempotent calls, and never a false lost claim ----------------------------


@pytest.fixture
def proxied(moto_url: str, bucket: str) -> Iterator[tuple[S3Backend, FaultyProxy]]:
    with FaultyProxy(moto_url) as proxy:
        backend = S3Backend.from_url(f"s3://{bucket}/r", endpoint_url=proxy.url, addressing_style="path")
        yield backend, proxy
        backend.close()


def test_reads_and_lists_are_retried(proxied: tuple[S3Backend, FaultyProxy]) -> None:
    backend, proxy = proxied
    token = backend.put("i/k", b"frame")
    proxy.reset_counts()
    proxy.fail("GET", "503")
    assert backend.get("i/k") == (b"frame", token)
    proxy.fail("GET", "reset", when=lambda p: "list-type=2" in p)
    assert list(backend.scan("i/")) == ["i/k"]
    assert proxy.count("GET") == 4


def test_unconditional_put_is_never_retried(proxied: tuple[S3Backend, FaultyProxy]) -> None:
    backend, proxy = proxied
    token = backend.put("i/k", b"old")
    proxy.reset_counts()
    proxy.fail("PUT", "503")
    with pytest.raises(berth.BackendError):
        backend.put("i/k", b"new")
    assert proxy.count("PUT") == 1
    assert backend.get("i/k") == (b"old", token), "a failed save leaves the previous frame"


def test_unconditional_put_is_repeated_after_slow_down(proxied: tuple[S3Backend, FaultyProxy]) -> None:
    backend, proxy = proxied
    proxy.fail("PUT", "slowdown")
    token = backend.put("i/k", b"frame")
    assert proxy.count("PUT") == 2
    assert backend.get("i/k") == (b"frame", token)


def test_conditional_delete_is_retried(proxied: tuple[S3Backend, FaultyProxy]) -> None:
    backend, proxy = proxied
    token = backend.put("i/k", b"frame")
    proxy.reset_counts()
    proxy.fail("DELETE", "reset")
    backend.delete("i/k", token)
    assert proxy.count("DELETE") == 2 and backend.get("i/k") is None


def test_retried_delete_that_finds_its_object_gone_is_unknown_not_lost(proxied: tuple[S3Backend, FaultyProxy]) -> None:
    # The first attempt deletes and its response is lost; the retry gets 404.
    # That is not a lost claim (this caller may have won): BackendError, never TokenMismatch.
    backend, proxy = proxied
    token = backend.put("i/k", b"frame")
    proxy.fail("DELETE", "reset_after")
    with pytest.raises(berth.BackendError) as info:
        backend.delete("i/k", token)
    assert not isinstance(info.value, berth.TokenMismatch)
    assert "unknown outcome" in str(info.value)
    assert backend.get("i/k") is None


def test_retried_create_that_finds_its_object_present_is_unknown(proxied: tuple[S3Backend, FaultyProxy]) -> None:
    backend, proxy = proxied
    proxy.fail("PUT", "503_after")
    with pytest.raises(berth.BackendError) as info:
        backend.put("i/k", b"frame", if_absent=True)
    assert not isinstance(info.value, berth.TokenMismatch)
    assert backend.get("i/k")[0] == b"frame"


# --- a server that goes away mid-loop ------------------------------------------------------


def _start_moto(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(moto_command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_http(f"http://127.0.0.1:{port}/moto-api/"):
        proc.kill()
        unavailable("moto", f"a private moto_server did not start on port {port}")
    return proc


def test_stopping_the_server_mid_loop_is_a_backend_error_never_a_false_success() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start_moto(port)
    try:
        _raw_client(url).create_bucket(Bucket="outage")
        store = berth.open_store(
            "s3://outage/p",
            identity="i",
            sealer=berth.PlaintextSealer(),
            endpoint_url=url,
            retry_attempts=2,
            connect_timeout=1,
            read_timeout=2,
        )
        # the outage starts once a few cycles have passed, however loaded the machine (a fixed
        # timer could fire before the first cycle ended, leaving no 'ok' to compare with)
        stopper = threading.Timer(0.2, proc.terminate)
        outcomes: list[str] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (len(outcomes) < 5 or outcomes[-5:] != ["error"] * 5):
            key = f"k{len(outcomes)}"
            try:
                store.save(key, make_envelope(key))
                parked = store.load(key)
                assert parked is not None and parked.envelope.run_id == key, "a saved envelope must load"
                assert store.claim(key) is not None, "the only claimer must win"
                outcomes.append("ok")
                if outcomes.count("ok") == 3:
                    stopper.start()
            except berth.BackendError as exc:
                assert not isinstance(exc, berth.TokenMismatch)
                outcomes.append("error")
        if stopper.ident is not None:  # started
            stopper.join()
        proc.wait(timeout=10)
        assert "ok" in outcomes and outcomes[-5:] == ["error"] * 5, outcomes
        assert outcomes.index("error") > 0 and "ok" not in outcomes[outcomes.index("error") + 1 :], outcomes

        proc = _start_moto(port)  # moto keeps no state across a restart: provision the bucket again
        _raw_client(url).create_bucket(Bucket="outage")
        store.save("after", make_envelope("after"))
        assert store.claim("after") is not None
        assert store.claim("after") is None
        store.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_foreign_object_under_the_prefix_never_stops_list_sweep_or_reseal(
    moto_url: str, bucket: str, raw: Any
) -> None:
    # issue 12.4: one object that is not a frame made list, sweep and reseal raise for everything
    from datetime import datetime, timezone

    store = berth.Store(
        S3Backend.from_url(f"s3://{bucket}/p", endpoint_url=moto_url), identity="id", sealer=berth.PlaintextSealer()
    )
    store.save("old", make_envelope(deadline=datetime(2000, 1, 1, tzinfo=timezone.utc)))
    store.save("live", make_envelope())
    raw.put_object(Bucket=bucket, Key="p/id/foreign", Body=b"x" * 40, Metadata={"berth-pad": "not a number"})
    raw.put_object(Bucket=bucket, Key="p/id/garbage", Body=b"something else's object")
    items = {i.key: i.error for i in store.list()}
    assert items["live"] is None and items["old"] is None and items["foreign"] and items["garbage"]
    assert store.sweep() == 1
    assert store.reseal().failed == 2
    with pytest.raises(berth.FormatError):
        store.load("foreign")
    assert {i.key for i in store.list()} == {"live", "foreign", "garbage"}
