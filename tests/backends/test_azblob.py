"""The azblob:// backend against Azurite: the store contract (sync, async, witnessed), large and torn frames,
names, paging, the container's setup, connections, and retries that never report a false lost claim."""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import berth
from berth._errors import StoreMissing
from berth.testing import AsyncStoreContract, StoreContract, make_envelope
from tests._azurite import ACCOUNT, ACCOUNT_KEY
from tests.backends._conditional import check_conditional_puts
from tests.conftest import closing_what_it_opens, require
from tests.fakes.proxy import FaultyProxy

require("azure.storage.blob", "Azure Blob Storage")
from azure.storage.blob import BlobServiceClient  # noqa: E402

from berth.backends.azblob import AsyncAzureBlobBackend, AzureBlobBackend  # noqa: E402

pytestmark = pytest.mark.azblob

_KIB = 1024
_clients: list[Any] = []


@pytest.fixture(autouse=True)
def azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No account from the environment unless a test sets one: nothing here can reach Azure."""
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AZURE_STORAGE_SAS_TOKEN", raising=False)


@pytest.fixture(autouse=True)
def close_what_tests_open(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every backend and client a test opens; what it leaked warns in it (tests/conftest.py)."""
    yield from closing_what_it_opens(monkeypatch, AzureBlobBackend, _clients)


@pytest.fixture
def service(azurite: str) -> Any:
    client = BlobServiceClient.from_connection_string(azurite)
    _clients.append(client)
    return client


@pytest.fixture
def container(service: Any) -> str:
    name = f"berth-{uuid.uuid4().hex[:20]}"
    service.create_container(name)
    return name


def _open(azurite: str, url: str, **options: Any) -> AzureBlobBackend:
    return AzureBlobBackend.from_url(url, connection_string=azurite, retry_backoff=0.05, **options)


class TestAzblobContract(StoreContract):
    tamper_stride = 7  # every seventh byte changed, not each: one round trip per byte costs minutes here

    @pytest.mark.slow
    def test_list_many(self, store: berth.Store) -> None:
        """600 frames (~4,500 requests): the store's paging, the same on every backend, in the slow run;
        this backend's own paging is `test_listing_pages`."""
        super().test_list_many(store)

    @pytest.fixture
    def backend_opener(self, azurite: str, container: str):
        return functools.partial(_open, azurite, f"azblob://{container}/contract")


class TestAzblobAsyncContract(AsyncStoreContract, TestAzblobContract):
    """The same cases through berth.aio, on the native async backend (azure-storage-blob's aio client)."""

    @pytest.fixture
    def async_backend_opener(self, azurite: str, container: str):
        return functools.partial(
            AsyncAzureBlobBackend.from_url, f"azblob://{container}/contract", connection_string=azurite
        )


def test_the_async_backend_is_native(azurite: str, container: str) -> None:
    async def run() -> None:
        store = berth.aio.open_store(
            f"azblob://{container}/p", identity="i", sealer=berth.PlaintextSealer(), connection_string=azurite
        )
        async with store:
            assert isinstance(store.backend, AsyncAzureBlobBackend)
            await store.save("k", make_envelope())
            assert (await store.claim("k")) is not None
            assert store.sync.load("k") is None, "the sync twin reads the same container"

    asyncio.run(run())


def test_a_witnessed_store_on_azblob(monkeypatch: pytest.MonkeyPatch, azurite: str, container: str) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite)  # the witness's URL takes no options
    store = berth.open_store(
        f"azblob://{container}/frames",
        identity="i",
        sealer=berth.AesGcmSealer(berth.Keyring.generate()),
        witness=f"azblob://{container}/witness",
    )
    store.save("k", make_envelope())
    assert store.claim("k") is not None
    assert store.claim("k") is None
    assert store.audit().ok
    store.close()


# --- the URL, the connection and the container ----------------------------------------------


@pytest.mark.parametrize(
    ("url", "prefix", "obj"),
    [("azblob://C", "", "i/k"), ("azblob://C/", "", "i/k"), ("azblob://C/a/b/", "a/b", "a/b/i/k")],
)
def test_prefix_handling(url: str, prefix: str, obj: str, azurite: str, container: str, service: Any) -> None:
    backend = _open(azurite, url.replace("C", container))
    assert backend.prefix == prefix
    backend.put("i/k", b"frame")
    assert [b.name for b in service.get_container_client(container).list_blobs()] == [obj]
    assert list(backend.scan("i/")) == ["i/k"]


@pytest.mark.parametrize(
    "url", ["azblob://", "azblob:///p", "azblob://c/a//b", "azblob://c/p#f", "azblob://c/p?page_size=0", "s3://c/p"]
)
def test_bad_urls_are_refused_before_any_io(url: str, azurite: str) -> None:
    with pytest.raises(berth.BerthError):
        _open(azurite, url)


def test_the_connection_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, azurite: str, container: str
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite)
    store = berth.open_store(f"azblob://{container}/env", identity="i", sealer=berth.PlaintextSealer())
    assert isinstance(store.backend, AzureBlobBackend)
    store.save("k", make_envelope())
    assert store.claim("k") is not None
    store.close()


def test_an_account_url_with_a_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, azurite: str, container: str
) -> None:
    endpoint = azurite.split("BlobEndpoint=")[1].rstrip(";")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_KEY", ACCOUNT_KEY)
    backend = AzureBlobBackend.from_url(f"azblob://{container}/p?account_url={endpoint}")
    token = backend.put("i/k", b"frame")
    assert backend.get("i/k") == (b"frame", token)
    backend.close()


def test_no_account_anywhere_is_an_error_naming_where_to_put_one() -> None:
    with pytest.raises(berth.BerthError, match="AZURE_STORAGE_CONNECTION_STRING"):
        AzureBlobBackend.from_url("azblob://c/p")


def test_a_wrong_key_is_a_backend_error_never_a_lost_claim(azurite: str, container: str) -> None:
    wrong = azurite.replace(ACCOUNT_KEY, base64.b64encode(b"not the key" * 6).decode())
    backend = AzureBlobBackend.from_url(f"azblob://{container}/p", connection_string=wrong, retry_total=0)
    with pytest.raises(berth.BackendError) as info:
        backend.delete("i/k", berth.Token('"0x1"'))
    assert not isinstance(info.value, berth.TokenMismatch)
    assert ACCOUNT_KEY not in str(info.value)


def test_a_missing_container_is_store_missing_and_setup_creates_it(azurite: str, service: Any) -> None:
    name = f"berth-missing-{uuid.uuid4().hex[:12]}"
    store = berth.open_store(
        f"azblob://{name}/p", identity="i", sealer=berth.PlaintextSealer(), connection_string=azurite
    )
    for call in (lambda: store.load("k"), lambda: list(store.list()), lambda: store.save("k", make_envelope())):
        with pytest.raises(StoreMissing, match="does not exist"):
            call()
    assert name not in {c.name for c in service.list_containers()}, "nothing is created silently"
    store.setup()
    store.setup()  # idempotent
    store.save("k", make_envelope())
    assert store.claim("k") is not None
    store.close()


# --- ETags and conditions ------------------------------------------------------------------


def test_identical_bytes_get_a_fresh_etag(azurite: str, container: str) -> None:
    backend = _open(azurite, f"azblob://{container}/p")
    first = backend.put("i/k", b"same bytes")
    second = backend.put("i/k", b"same bytes")
    assert first != second
    assert backend.get("i/k") == (b"same bytes", second)
    with pytest.raises(berth.TokenMismatch):
        backend.delete("i/k", first)
    backend.delete("i/k", second)
    assert backend.get("i/k") is None
    with pytest.raises(berth.TokenMismatch):
        backend.delete("i/k", second)


def test_conditional_puts(azurite: str, container: str) -> None:
    # another backend's token (an int) is refused before any I/O
    check_conditional_puts(_open(azurite, f"azblob://{container}"), foreign_token=berth.Token(7))


# --- large and torn frames -----------------------------------------------------------------


def _small_blocks(azurite: str, container: str, **options: Any) -> AzureBlobBackend:
    return _open(azurite, f"azblob://{container}/big?single_put_size={64 * _KIB}&block_size={16 * _KIB}", **options)


def test_a_frame_over_the_single_put_size_round_trips_in_blocks(azurite: str, container: str, service: Any) -> None:
    backend = _small_blocks(azurite, container)
    frame = os.urandom(200 * _KIB + 7)
    token = backend.put("i/k", frame)
    assert backend.get("i/k") == (frame, token)
    blob = service.get_blob_client(container, "big/i/k")
    assert len(blob.get_block_list("committed")[0]) == 13, "200 KiB in 16 KiB blocks"
    assert [(n, h, t, s) for n, h, t, s in backend.heads("i/", 5)] == [("i/k", frame[:5], token, len(frame))]
    with pytest.raises(berth.TokenMismatch):
        backend.put("i/k", frame, if_absent=True)
    newer = backend.put("i/k", frame[::-1], if_match=token)
    with pytest.raises(berth.TokenMismatch):
        backend.put("i/k", frame, if_match=token)
    assert backend.get("i/k") == (frame[::-1], newer)


def test_an_envelope_over_the_single_put_size_round_trips_through_the_store(azurite: str, container: str) -> None:
    store = berth.Store(
        _small_blocks(azurite, container), identity="i", sealer=berth.AesGcmSealer(berth.Keyring.generate())
    )
    envelope = make_envelope(provider_state={"blob": "x" * 300_000})
    store.save("k", envelope)
    claimed = store.claim("k")
    assert claimed is not None and claimed.provider_state == envelope.provider_state
    store.close()


def test_a_partly_staged_upload_is_never_read(azurite: str, container: str, service: Any) -> None:
    # A writer that died between staging its blocks and committing them left blocks, never a frame.
    backend = _small_blocks(azurite, container)
    token = backend.put("i/k", b"the parked frame")
    for obj in ("big/i/k", "big/i/new"):
        blob = service.get_blob_client(container, obj)
        blob.stage_block(base64.b64encode(b"torn" * 4).decode(), b"half of a frame")
    assert backend.get("i/k") == (b"the parked frame", token)
    assert backend.get("i/new") is None
    assert sorted(backend.scan("i/")) == ["i/k"]
    assert [h[0] for h in backend.heads("i/", 4)] == ["i/k"]
    backend.delete("i/k", token)
    frame = os.urandom(100 * _KIB)  # a new upload commits its own blocks, never the dead writer's
    token = backend.put("i/new", frame)
    assert backend.get("i/new") == (frame, token)


def test_two_writers_of_one_large_frame_never_tear_it(azurite: str, container: str) -> None:
    # Each commit discards the blocks other writers staged: a loser stages again (a few times, then
    # BackendError, its save not made); whatever wins, the blob is one writer's frame, whole.
    backend = _small_blocks(azurite, container)
    frames = [bytes([n]) * (150 * _KIB) for n in range(3)]
    errors: list[BaseException] = []
    saved: list[bytes] = []

    def write(frame: bytes) -> None:
        try:
            backend.put("i/k", frame)
            saved.append(frame)
        except berth.BackendError as exc:
            assert "discarded" in str(exc), exc
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(f,)) for f in frames]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    found = backend.get("i/k")
    assert saved and found is not None and found[0] in saved, "the blob is one writer's frame, whole"


def test_conditional_writers_of_one_large_frame_lose_with_token_mismatch_never_a_torn_frame(
    azurite: str, container: str
) -> None:
    # Four writers replace one large frame, each with If-Match on the same ETag, while their commits
    # discard each other's staged blocks. At most one wins; every other gets TokenMismatch or a
    # BackendError (its blocks discarded every time, or an unknown outcome), never a success; the
    # blob is then the winner's frame whole, or the old one when none won, never a mix.
    backend = _small_blocks(azurite, container)
    won: list[tuple[bytes, berth.Token]] = []
    lost: list[BaseException] = []
    errors: list[BaseException] = []

    def write(frame: bytes, token: berth.Token) -> None:
        try:
            won.append((frame, backend.put("i/k", frame, if_match=token)))
        except (berth.TokenMismatch, berth.BackendError) as exc:
            lost.append(exc)
        except BaseException as exc:  # reported below
            errors.append(exc)

    for round_ in range(2):
        old = bytes([100 + round_]) * (150 * _KIB)
        token = backend.put("i/k", old)
        frames = [bytes([n, round_]) * (75 * _KIB) for n in range(4)]
        won.clear(), lost.clear()
        threads = [threading.Thread(target=write, args=(f, token)) for f in frames]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert len(won) <= 1 and len(won) + len(lost) == 4, (won, lost)
        assert all(
            isinstance(exc, berth.TokenMismatch) or "discarded" in str(exc) or "unknown outcome" in str(exc)
            for exc in lost
        ), lost
        found = backend.get("i/k")
        assert found is not None
        if won:
            assert found == won[0], "the winner's frame, whole, under the ETag its save returned"
        else:  # none won: the old frame, unless a writer of unknown outcome committed its own whole
            assert found[0] == old or (found[0] in frames and any("unknown" in str(e) for e in lost))


def test_a_large_frame_through_the_async_backend(azurite: str, container: str) -> None:
    async def run() -> None:
        backend = AsyncAzureBlobBackend(
            container, "big", connection_string=azurite, single_put_size=64 * _KIB, block_size=16 * _KIB
        )
        frame = os.urandom(130 * _KIB)
        token = await backend.put("i/k", frame)
        assert await backend.get("i/k") == (frame, token)
        assert [h async for h in backend.heads("i/", 3)] == [("i/k", frame[:3], token, len(frame))]
        await backend.delete("i/k", token)
        assert await backend.get("i/k") is None
        await backend.aclose()

    asyncio.run(run())


# --- names and paging ----------------------------------------------------------------------


def test_backslashes_and_final_dots_are_names_of_their_own(azurite: str, container: str, service: Any) -> None:
    # Azure reads `\` in a blob name as `/`: unescaped, `a\b` and `a/b` would be one blob.
    backend = _open(azurite, f"azblob://{container}/p")
    names = ["i/a\\b", "i/a/b", "i/a.", "i/a./b", "i/50%", "i/a.b"]
    tokens = {name: backend.put(name, name.encode()) for name in names}
    assert {name: backend.get(name) for name in names} == {n: (n.encode(), t) for n, t in tokens.items()}
    assert sorted(backend.scan("i/")) == sorted(names)
    assert sorted(backend.scan("i/a.")) == ["i/a.", "i/a./b", "i/a.b"]
    stored = {b.name for b in service.get_container_client(container).list_blobs()}
    assert not any("\\" in s or s.endswith(".") for s in stored), stored


def test_names_over_the_limit_are_hashed_and_listed(azurite: str, container: str) -> None:
    backend = _open(azurite, f"azblob://{container}/deep/prefix")
    long_a, long_b, short = "i/" + "é" * 600, "i/" + "é" * 599 + "x", "i/short"
    for name in (long_a, long_b, short):
        backend.put(name, name.encode()[-8:] + b"-frame")
    assert sorted(backend.scan("i/")) == sorted([long_a, long_b, short])
    assert list(backend.scan("i/" + "é" * 600)) == [long_a]
    assert backend.get(long_a)[0] == long_a.encode()[-8:] + b"-frame"
    backend.delete(long_b, backend.get(long_b)[1])
    assert sorted(backend.scan("i/")) == sorted([long_a, short])


def test_listing_pages(azurite: str, container: str) -> None:
    backend = _open(azurite, f"azblob://{container}/p?page_size=7")
    names = [f"i/{n:03d}" for n in range(30)]
    for name in names:
        backend.put(name, b"x")
    asked: list[int] = []
    pages: list[int] = []
    list_blobs = backend._client.list_blobs

    def recording(**kwargs: Any) -> Any:
        asked.append(kwargs["results_per_page"])
        pager = list_blobs(**kwargs)
        by_page = pager.by_page

        def counted() -> Iterator[Any]:
            for page in by_page():
                items = list(page)
                pages.append(len(items))
                yield iter(items)

        pager.by_page = counted
        return pager

    backend._client.list_blobs = recording
    assert list(backend.scan("i/")) == names
    assert asked == [7] and pages == [7, 7, 7, 7, 2]
    assert [n for n, *_ in backend.heads("i/01", 1)] == names[10:20]
    assert [n for n, *_ in backend.sorted_heads("i/", 1, limit=3, reverse=True)] == names[:-4:-1]


# --- retries: only what cannot have applied, and never a false lost claim ------------------


@pytest.fixture
def proxied(azurite: str, container: str) -> Iterator[tuple[AzureBlobBackend, FaultyProxy]]:
    endpoint = azurite.split("BlobEndpoint=")[1].rstrip(";")
    upstream = endpoint.rsplit("/", 1)[0]
    with FaultyProxy(upstream) as proxy:
        through = azurite.replace(upstream, proxy.url)
        backend = AzureBlobBackend.from_url(f"azblob://{container}/r", connection_string=through, retry_backoff=0.01)
        yield backend, proxy
        backend.close()


def test_reads_and_lists_are_retried(proxied: tuple[AzureBlobBackend, FaultyProxy]) -> None:
    backend, proxy = proxied
    token = backend.put("i/k", b"frame")
    proxy.reset_counts()
    proxy.fail("GET", "503")
    assert backend.get("i/k") == (b"frame", token)
    proxy.fail("GET", "reset", when=lambda p: "comp=list" in p)
    assert list(backend.scan("i/")) == ["i/k"]
    assert proxy.count("GET") == 4


def test_an_unconditional_put_is_not_repeated_after_an_ambiguous_failure(
    proxied: tuple[AzureBlobBackend, FaultyProxy],
) -> None:
    backend, proxy = proxied
    token = backend.put("i/k", b"old")
    proxy.reset_counts()
    proxy.fail("PUT", "reset")  # dropped: applied or not, the client cannot know
    with pytest.raises(berth.BackendError):
        backend.put("i/k", b"new")
    assert proxy.count("PUT") == 1
    assert backend.get("i/k") == (b"old", token), "a failed save leaves the previous frame"
    proxy.fail("PUT", "503_after")  # applied, then a bare 503 (not Azure's ServerBusy): not repeated either
    with pytest.raises(berth.BackendError):
        backend.put("i/k", b"newer")
    assert proxy.count("PUT") == 2


def test_an_unconditional_put_is_repeated_when_the_service_was_busy(
    proxied: tuple[AzureBlobBackend, FaultyProxy],
) -> None:
    backend, proxy = proxied
    proxy.fail("PUT", "serverbusy")
    token = backend.put("i/k", b"frame")
    assert proxy.count("PUT") == 2
    assert backend.get("i/k") == (b"frame", token)


def test_a_conditional_delete_is_retried(proxied: tuple[AzureBlobBackend, FaultyProxy]) -> None:
    backend, proxy = proxied
    token = backend.put("i/k", b"frame")
    proxy.reset_counts()
    proxy.fail("DELETE", "reset")
    backend.delete("i/k", token)
    assert proxy.count("DELETE") == 2 and backend.get("i/k") is None


def test_a_retried_delete_that_finds_its_blob_gone_is_unknown_not_lost(
    proxied: tuple[AzureBlobBackend, FaultyProxy],
) -> None:
    # The first attempt deletes and its response is lost; the retry gets 404: this caller may have won.
    backend, proxy = proxied
    token = backend.put("i/k", b"frame")
    proxy.fail("DELETE", "reset_after")
    with pytest.raises(berth.BackendError) as info:
        backend.delete("i/k", token)
    assert not isinstance(info.value, berth.TokenMismatch)
    assert "unknown outcome" in str(info.value)
    assert backend.get("i/k") is None
